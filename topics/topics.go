// Package topics validates and matches MQTT topic filters (MQTT 3.1.1 §4.7),
// for the config checks, route matching and the embedded listener's access
// control.
package topics

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// sharePrefix starts a shared subscription: $share/GROUP/filter.
const sharePrefix = "$share/"

// ErrTopicFilter is wrapped by every error ValidateFilter returns.
var ErrTopicFilter = errors.New("invalid topic filter")

// ValidateFilter checks that f is a valid MQTT topic filter (MQTT 3.1.1
// §4.7): not empty, valid UTF-8 without NUL, "#" only as the whole last
// level, "+" only as a whole level. A shared subscription
// ($share/GROUP/filter) needs a non-empty GROUP without wildcards and a valid
// filter.
func ValidateFilter(f string) error {
	if f == "" {
		return fmt.Errorf("%w: empty", ErrTopicFilter)
	}
	if len(f) > 65535 {
		return fmt.Errorf("%w: longer than 65535 bytes", ErrTopicFilter)
	}
	if !utf8.ValidString(f) || strings.ContainsRune(f, 0) {
		return fmt.Errorf("%w: %q is not valid UTF-8 or contains NUL", ErrTopicFilter, f)
	}
	if strings.HasPrefix(f, sharePrefix) {
		rest := f[len(sharePrefix):]
		group, filter, ok := strings.Cut(rest, "/")
		switch {
		case !ok || group == "":
			return fmt.Errorf("%w: %q: a shared subscription is $share/GROUP/filter", ErrTopicFilter, f)
		case strings.ContainsAny(group, "+#"):
			return fmt.Errorf("%w: %q: share group %q must not contain + or #", ErrTopicFilter, f, group)
		case filter == "":
			return fmt.Errorf("%w: %q: a shared subscription needs a filter after $share/%s/", ErrTopicFilter, f, group)
		}
		f = filter
	} else if f == "$share" {
		return fmt.Errorf("%w: %q: a shared subscription is $share/GROUP/filter", ErrTopicFilter, f)
	}
	levels := strings.Split(f, "/")
	for i, l := range levels {
		switch {
		case l == "#" && i != len(levels)-1:
			return fmt.Errorf("%w: %q: # must be the last level", ErrTopicFilter, f)
		case strings.Contains(l, "#") && l != "#":
			return fmt.Errorf("%w: %q: # must occupy a whole level", ErrTopicFilter, f)
		case strings.Contains(l, "+") && l != "+":
			return fmt.Errorf("%w: %q: + must occupy a whole level", ErrTopicFilter, f)
		}
	}
	return nil
}

// stripShare removes a $share/GROUP/ prefix from a filter.
func stripShare(f string) string {
	if !strings.HasPrefix(f, sharePrefix) {
		return f
	}
	rest := f[len(sharePrefix):]
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[i+1:]
	}
	return f
}

// Match reports whether topic (a concrete topic name) matches the MQTT topic
// filter, with "+" matching one level and a trailing "#" matching the parent
// and any number of levels. A $share/GROUP/ prefix on the filter is ignored.
// Wildcards at the first level do not match topics starting with "$"
// (MQTT 3.1.1 §4.7.2). Match does not allocate.
func Match(filter, topic string) bool {
	filter = stripShare(filter)
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	for {
		level, filterRest, filterMore := strings.Cut(filter, "/")
		if level == "#" {
			return true
		}
		topicLevel, topicRest, topicMore := strings.Cut(topic, "/")
		if level != "+" && level != topicLevel {
			return false
		}
		switch {
		case !filterMore:
			return !topicMore
		case !topicMore:
			return filterRest == "#" // "x/#" matches its parent "x"
		}
		filter, topic = filterRest, topicRest
	}
}

// MatchAny reports whether topic matches one of filters (see Match).
func MatchAny(filters []string, topic string) bool {
	return slices.ContainsFunc(filters, func(f string) bool { return Match(f, topic) })
}

// Covers reports whether every topic that matches filter inner also matches
// filter outer (both valid filters; $share/GROUP/ prefixes are ignored).
func Covers(outer, inner string) bool {
	o := strings.Split(stripShare(outer), "/")
	in := strings.Split(stripShare(inner), "/")
	if dollarOnly(in[0], o[0]) {
		return false
	}
	for i, l := range in {
		if i >= len(o) {
			return false
		}
		switch ol := o[i]; {
		case ol == "#":
			return true
		case l == "#":
			return false
		case l == "+":
			if ol != "+" {
				return false
			}
		case ol != "+" && ol != l:
			return false
		}
	}
	// inner is exhausted; outer may have one trailing "#" (matches the parent).
	return len(o) == len(in) || (len(o) == len(in)+1 && o[len(in)] == "#")
}

// Overlaps reports whether some topic name matches both filters (both
// valid; $share/GROUP/ prefixes are ignored), so that a message on that topic
// is delivered by a subscription to one and taken by a route with the other.
// It agrees with Match: a wildcard first level never matches a topic that
// starts with "$", so "#" and "$SYS/#" do not overlap.
func Overlaps(a, b string) bool {
	x := strings.Split(stripShare(a), "/")
	y := strings.Split(stripShare(b), "/")
	if dollarOnly(x[0], y[0]) || dollarOnly(y[0], x[0]) {
		return false
	}
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] == "#" || y[i] == "#" {
			return true
		}
		if x[i] != "+" && y[i] != "+" && x[i] != y[i] {
			return false
		}
	}
	switch {
	case len(x) == len(y):
		return true
	case len(x) == len(y)+1:
		return x[len(y)] == "#" // "a/#" matches its parent "a"
	case len(y) == len(x)+1:
		return y[len(x)] == "#"
	}
	return false
}

// dollarOnly reports whether a filter whose first level is first matches
// only "$" topics, which a filter whose first level is other can never
// match (MQTT 3.1.1 §4.7.2).
func dollarOnly(first, other string) bool {
	return strings.HasPrefix(first, "$") && (other == "+" || other == "#")
}
