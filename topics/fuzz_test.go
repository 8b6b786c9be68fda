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
