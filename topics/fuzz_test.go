package topics_test

import (
	"strings"
	"testing"

	"github.com/gobridge/gobridge/topics"
)

// FuzzMatch checks Match against a straightforward split-based matcher.
func FuzzMatch(f *testing.F) {
	f.Add("a/+/c", "a/b/c")
	f.Add("a/#", "a")
	f.Add("#", "$SYS/x")
	f.Add("$share/g/+/x", "a/x")
	f.Fuzz(func(t *testing.T, filter, topic string) {
		if topics.ValidateFilter(filter) != nil || strings.ContainsAny(topic, "+#") {
			return
		}
		if got, want := topics.Match(filter, topic), refMatch(filter, topic); got != want {
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

// FuzzCovers checks Covers against Match: when outer covers inner, every
// topic that inner matches, outer matches too. The listener's subscribe
// ACL relies on it.
func FuzzCovers(f *testing.F) {
	f.Add("a/#", "a/+/c", "a/b/c")
	f.Add("+/x", "$SYS/x", "$SYS/x")
	f.Add("#", "a", "a")
	f.Add("a/+", "a/#", "a")
	f.Fuzz(func(t *testing.T, outer, inner, topic string) {
		if topics.ValidateFilter(outer) != nil || topics.ValidateFilter(inner) != nil || strings.ContainsAny(topic, "+#") {
			return
		}
		if topics.Covers(outer, inner) && topics.Match(inner, topic) && !topics.Match(outer, topic) {
			t.Fatalf("Covers(%q, %q), yet %q matches only the inner filter", outer, inner, topic)
		}
	})
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
		if topics.ValidateFilter(a) != nil || topics.ValidateFilter(b) != nil {
			return
		}
		if strings.Count(a, "/") > 6 || strings.Count(b, "/") > 6 {
			return // keep the search small
		}
		got, want := topics.Overlaps(a, b), refOverlaps(a, b)
		if got != want {
			t.Fatalf("Overlaps(%q, %q) = %v, the search says %v", a, b, got, want)
		}
		if topics.Overlaps(b, a) != got {
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
			if topics.Match(a, topic) && topics.Match(b, topic) {
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
