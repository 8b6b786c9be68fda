package listener

import "strings"

// filterMatches reports whether an MQTT topic filter (with + and #, and an
// optional $share/GROUP/ prefix) matches a topic name. Per MQTT 3.1.1
// §4.7.2, a filter starting with a wildcard does not match topics starting
// with '$'.
func filterMatches(filter, topic string) bool {
	if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
		_, f, found := strings.Cut(rest, "/")
		if !found {
			return false
		}
		filter = f
	}
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	fs := strings.Split(filter, "/")
	ts := strings.Split(topic, "/")
	for i, f := range fs {
		if f == "#" {
			return i == len(fs)-1 // "#" must be last; it also matches the parent level
		}
		if i >= len(ts) {
			return false
		}
		if f != "+" && f != ts[i] {
			return false
		}
	}
	return len(fs) == len(ts)
}
