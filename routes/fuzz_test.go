package routes_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gobridge/gobridge/routes"
)

// FuzzLoad feeds random bytes and mutated blueprints to the loader. It must
// never panic, and a config that validates without errors must marshal back
// to YAML that loads again without errors, to the same config.
func FuzzLoad(f *testing.F) {
	for _, glob := range []string{"../blueprints/*.yaml", "../testdata/config/*.yaml"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
		}
	}
	f.Add([]byte("version: 1\nbridge: {id: x}\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, probs, err := routes.ParseWithEnv(bytes.NewReader(data), "fuzz.yaml", noEnv)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range probs {
			if p.Line < 1 || p.Column < 1 || p.Rule == "" || p.Message == "" {
				t.Fatalf("malformed problem %+v", p)
			}
		}
		if cfg == nil || probs.HasErrors() {
			return
		}
		out, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatalf("marshal a valid config: %v", err)
		}
		if bytes.Contains(out, []byte("${")) {
			return // a literal "${" (written $${) would be expanded again
		}
		cfg2, probs2, err := routes.ParseWithEnv(bytes.NewReader(out), "remarshal.yaml", noEnv)
		if err != nil || probs2.HasErrors() {
			t.Fatalf("re-marshalled config does not load: %v %v\n%s", err, probs2, out)
		}
		out2, err := yaml.Marshal(cfg2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out, out2) {
			t.Fatalf("config changed on a round trip:\n%s\n---\n%s", out, out2)
		}
	})
}

// FuzzMatch checks Match against a straightforward split-based matcher.
func FuzzMatch(f *testing.F) {
	f.Add("a/+/c", "a/b/c")
	f.Add("a/#", "a")
	f.Add("#", "$SYS/x")
	f.Add("$share/g/+/x", "a/x")
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if routes.ValidateFilter(filter) != nil || strings.ContainsAny(topic, "+#") {
			return
		}
		if got, want := routes.Match(filter, topic), refMatch(filter, topic); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference says %v", filter, topic, got, want)
		}
	})
}

func refMatch(filter, topic string) bool {
	if strings.HasPrefix(filter, "$share/") {
		_, rest, _ := strings.Cut(filter[len("$share/"):], "/")
		filter = rest
	}
	fs, ts := strings.Split(filter, "/"), strings.Split(topic, "/")
	if strings.HasPrefix(topic, "$") && (fs[0] == "+" || fs[0] == "#") {
		return false
	}
	for i, f := range fs {
		if f == "#" {
			return true
		}
		if i >= len(ts) || (f != "+" && f != ts[i]) {
			return false
		}
	}
	return len(fs) == len(ts)
}

// FuzzOverlaps checks Overlaps against a search for a topic that matches
// both filters: a topic built, level by level, from the literal levels of
// either filter or a fresh "z", at most one level longer than the longer
// filter. Every shortest common topic has that form, so the search is
// complete.
func FuzzOverlaps(f *testing.F) {
	f.Add("a/+/c", "a/b/#")
	f.Add("#", "$SYS/x")
	f.Add("$share/g/a/#", "a")
	f.Add("+/+", "/")
	f.Add("a/+/#", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		if routes.ValidateFilter(a) != nil || routes.ValidateFilter(b) != nil {
			return
		}
		if strings.Count(a, "/") > 6 || strings.Count(b, "/") > 6 {
			return // keep the search small
		}
		got, want := routes.Overlaps(a, b), refOverlaps(a, b)
		if got != want {
			t.Fatalf("Overlaps(%q, %q) = %v, the search says %v", a, b, got, want)
		}
		if routes.Overlaps(b, a) != got {
			t.Fatalf("Overlaps(%q, %q) is not symmetric", a, b)
		}
	})
}

func refOverlaps(a, b string) bool {
	levels := func(f string) []string {
		if strings.HasPrefix(f, "$share/") {
			_, f, _ = strings.Cut(f[len("$share/"):], "/")
		}
		return strings.Split(f, "/")
	}
	x, y := levels(a), levels(b)
	n := max(len(x), len(y)) + 1
	choices := func(i int) []string {
		c := []string{"z"}
		for _, fl := range [][]string{x, y} {
			if i < len(fl) && fl[i] != "+" && fl[i] != "#" {
				c = append(c, fl[i])
			}
		}
		return c
	}
	var try func(prefix []string) bool
	try = func(prefix []string) bool {
		if len(prefix) > 0 {
			topic := strings.Join(prefix, "/")
			if routes.Match(a, topic) && routes.Match(b, topic) {
				return true
			}
		}
		if len(prefix) == n {
			return false
		}
		for _, l := range choices(len(prefix)) {
			if try(append(prefix, l)) {
				return true
			}
		}
		return false
	}
	return try(nil)
}
