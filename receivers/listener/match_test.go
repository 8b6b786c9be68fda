package listener

import (
	"strings"
	"testing"
)

func TestFilterMatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{
		{"#", "a/b", true},
		{"#", "$SYS/x", false},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/+", "a/b", true},
		{"a/+", "a/b/c", false},
		{"a/+/c", "a/b/c", true},
		{"+/+", "/x", true},
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"a", "a/b", false},
		{"$share/g/a/+", "a/b", true},
		{"$share/g", "a", false},
		{"+/x", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	} {
		if got := filterMatches(c.filter, c.topic); got != c.want {
			t.Errorf("filterMatches(%q, %q) = %v, want %v", c.filter, c.topic, got, c.want)
		}
	}
}

func FuzzFilterMatches(f *testing.F) {
	for _, s := range [][2]string{{"a/+/c", "a/b/c"}, {"#", "$SYS/x"}, {"$share/g/a/#", "a"}, {"", ""}, {"+/+", "/"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, filter, topic string) {
		got := filterMatches(filter, topic) // must not panic
		// A filter without wildcards matches exactly itself.
		if !strings.ContainsAny(filter, "+#") && !strings.HasPrefix(filter, "$share/") {
			if want := filter == topic; got != want {
				t.Fatalf("filterMatches(%q, %q) = %v, want %v", filter, topic, got, want)
			}
		}
	})
}
