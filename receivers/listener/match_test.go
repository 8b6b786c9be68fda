package listener

import "testing"

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
