package routes_test

import (
	"bytes"
	"os"
	"path/filepath"
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
