package topics_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gobridge/gobridge/topics"
)

func TestMatch_Wildcards(t *testing.T) {
	cases := []struct {
		filter, topic string
		want          bool
	}{
		{"a/b/c", "a/b/c", true},
		{"a/b/c", "a/b", false},
		{"a/b", "a/b/c", false},
		{"a/+/c", "a/x/c", true},
		{"a/+/c", "a/x/y/c", false},
		{"a/+", "a/", true},
		{"+", "a", true},
		{"+", "a/b", false},
		{"+/+", "/a", true},
		{"#", "a/b/c", true},
		{"#", "", true},
		{"a/#", "a", true},
		{"a/#", "a/b/c", true},
		{"a/#", "ab", false},
		{"a/b/#", "a/c", false},
		{"+/b/#", "x/b", true},
		{"#", "$SYS/broker", false},
		{"+/broker", "$SYS/broker", false},
		{"$SYS/#", "$SYS/broker", true},
		{"$share/g/a/+", "a/b", true},
		{"$share/g/a/+", "a/b/c", false},
		{"$share/g/#", "x", true},
		{"a//b", "a//b", true},
		{"a/+/b", "a//b", true},
		{"factory/+/telemetry", "factory/line-1/telemetry", true},
		{"factory/+/telemetry", "factory/line-1/alarms", false},
	}
	for _, c := range cases {
		if got := topics.Match(c.filter, c.topic); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.filter, c.topic, got, c.want)
		}
	}
}

func TestMatchAny(t *testing.T) {
	filters := []string{"a/+", "b/#"}
	for topic, want := range map[string]bool{"a/x": true, "b/x/y": true, "c": false, "a/x/y": false} {
		if got := topics.MatchAny(filters, topic); got != want {
			t.Errorf("MatchAny(%q, %q) = %v, want %v", filters, topic, got, want)
		}
	}
	if topics.MatchAny(nil, "a") {
		t.Error("MatchAny(nil) matched")
	}
}

func TestMatch_DoesNotAllocate(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		topics.Match("$share/g/factory/+/telemetry/#", "factory/line-1/telemetry/x/y")
	})
	if allocs != 0 {
		t.Fatalf("Match allocates %v times per call", allocs)
	}
}

func TestValidateFilter_Syntax(t *testing.T) {
	valid := []string{"#", "+", "a/b", "a/+/c", "a/#", "/", "+/+/#", "$SYS/#", "$share/g/a/#", "$share/g/#"}
	for _, f := range valid {
		if err := topics.ValidateFilter(f); err != nil {
			t.Errorf("ValidateFilter(%q) = %v, want nil", f, err)
		}
	}
	invalid := []string{"", "a/#/b", "a#", "a/b#", "a+/b", "a/+b", "$share", "$share/", "$share//a", "$share/g", "$share/g/", "$share/g#/a", "$share/g+/a", "a\x00b", "\xff"}
	for _, f := range invalid {
		if err := topics.ValidateFilter(f); !errors.Is(err, topics.ErrTopicFilter) {
			t.Errorf("ValidateFilter(%q) = %v, want ErrTopicFilter", f, err)
		}
	}
}

func TestCovers_Filters(t *testing.T) {
	cases := []struct {
		outer, inner string
		want         bool
	}{
		{"#", "a/b", true},
		{"#", "a/#", true},
		{"a/#", "a", true},
		{"a/#", "a/+/c", true},
		{"a/+", "a/b", true},
		{"a/+", "a/+", true},
		{"a/+", "a/#", false},
		{"a/+", "a/b/c", false},
		{"a/b", "a/+", false},
		{"a/+/c", "a/b/c", true},
		{"a/+/c", "a/b/d", false},
		{"+/+", "a", false},
		{"$share/g/factory/+/alarms", "factory/line-1/alarms", true},
		{"factory/+/telemetry", "$share/g/factory/x/telemetry", true},
		{"#", "$SYS/x", false},
		{"$SYS/#", "$SYS/x", true},
	}
	for _, c := range cases {
		if got := topics.Covers(c.outer, c.inner); got != c.want {
			t.Errorf("Covers(%q, %q) = %v, want %v", c.outer, c.inner, got, c.want)
		}
	}
}

// TestCovers_AgreesWithMatch checks Covers against Match on sample topics:
// when outer covers inner, every topic inner matches, outer matches too.
func TestCovers_AgreesWithMatch(t *testing.T) {
	filters := []string{"#", "+", "a", "a/#", "a/+", "a/b", "+/b", "a/+/c", "+/+", "a/b/#", "+/#"}
	names := []string{"a", "b", "a/b", "a/c", "x/b", "a/b/c", "a/x/c", "a/b/c/d", "", "/", "a/"}
	for _, o := range filters {
		for _, in := range filters {
			if !topics.Covers(o, in) {
				continue
			}
			for _, tp := range names {
				if topics.Match(in, tp) && !topics.Match(o, tp) {
					t.Errorf("Covers(%q, %q) but %q matches only the inner filter", o, in, tp)
				}
			}
		}
	}
}

func TestOverlaps_Filters(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"a/+", "a/b", true},
		{"a/#", "b/#", false},
		{"a/#", "a", true},
		{"a", "a/#", true},
		{"a/b", "a/c", false},
		{"+/b", "a/+", true},
		{"a/b/c", "a/+", false},
		{"a/+/#", "a", false},
		{"+/#", "a", true},
		{"#", "+", true},
		{"/", "+/+", true},
		{"+", "/", false},
		// a wildcard first level never matches a "$" topic
		{"#", "$SYS/broker", false},
		{"$SYS/#", "#", false},
		{"+/broker", "$SYS/+", false},
		{"$SYS/#", "$SYS/broker/+", true},
		{"$SYS/#", "$share/g/#", false},
		// $share/GROUP/ is not part of the topic
		{"$share/g/a/+", "a/b", true},
		{"$share/g/a/+", "$share/h/+/b", true},
		{"$share/g/#", "x/y", true},
		{"$share/g/a/#", "b", false},
	}
	for _, c := range cases {
		if got := topics.Overlaps(c.a, c.b); got != c.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func BenchmarkMatch(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		topics.Match("factory/+/telemetry/#", "factory/line-1/telemetry/press/3")
	}
}

func ExampleMatch() {
	fmt.Println(topics.Match("factory/+/telemetry", "factory/line-1/telemetry"))
	fmt.Println(topics.Match("$share/gobridge/factory/#", "factory/line-1/alarms"))
	fmt.Println(topics.Match("#", "$SYS/uptime"))
	// Output:
	// true
	// true
	// false
}
