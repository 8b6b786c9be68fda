package routes_test

import (
	"fmt"
	"slices"
	"testing"
)

// rulesOf returns the rule names of the problems of doc, in order.
func rulesOf(t *testing.T, doc string) []string {
	t.Helper()
	_, probs := load(t, doc, nil)
	var rules []string
	for _, p := range probs {
		rules = append(rules, p.Rule)
	}
	return rules
}

const wiringDoc = `version: 1
bridge: {id: test}
stores: {outbox: {type: sqlite}}
receivers:
  - {id: edge, type: mqtt_listener, topics: [{topic: "%s"}]}
senders:
  - {id: out, type: stdout}
  - {id: other, type: stdout}
routes:
  - {id: a, receiver: edge, topic: "%s", sender: out, delivery_mode: %s, session: {id: s}}
  - {id: b, receiver: %s, topic: "%s", sender: %s, delivery_mode: %s, session: {id: s}}
`

func TestRules_UnroutedSubscription(t *testing.T) {
	cases := []struct {
		sub, topic string
		unrouted   bool
	}{
		{"factory/#", "factory/+/alarms", false},   // overlaps, though not all of it is routed
		{"$share/g/factory/#", "factory/x", false}, // $share/GROUP/ is not part of the topic
		{"factory/+/alarms", "$share/g/#", false},  // nor on the route
		{"factory/+/alarms", "factory/+/status", true},
		{"$SYS/#", "#", true}, // a leading wildcard never matches $ topics
		{"$SYS/#", "$SYS/broker/load", false},
	}
	for _, c := range cases {
		doc := fmt.Sprintf(wiringDoc, c.sub, c.topic, "shared_outbox", "edge", c.topic, "out", "shared_outbox")
		rules := rulesOf(t, doc)
		if has := slices.Contains(rules, "unrouted-subscription"); has != c.unrouted {
			t.Errorf("subscription %q, routes on %q: rules %v, want unrouted-subscription %v", c.sub, c.topic, rules, c.unrouted)
		}
	}
}

// TestRules_NoGuessingAfterADanglingReference checks that a route naming an
// unknown receiver or sender does not also make its intended receiver
// "unrouted" or its intended sender "unused".
func TestRules_NoGuessingAfterADanglingReference(t *testing.T) {
	doc := fmt.Sprintf(wiringDoc, "#", "#", "shared_outbox", "egde", "#", "otehr", "shared_outbox")
	rules := rulesOf(t, doc)
	if slices.Contains(rules, "unrouted-subscription") || slices.Contains(rules, "unused-sender") ||
		!slices.Contains(rules, "unknown-receiver") || !slices.Contains(rules, "unknown-sender") {
		t.Errorf("rules %v", rules)
	}
}

func TestRules_DirectHoldSharedReceiver(t *testing.T) {
	cases := []struct {
		name        string
		modeB, send string
		warnings    int
	}{
		{"held route next to an outbox route", "shared_outbox", "other", 1},
		{"two held routes to different targets", "direct_hold", "other", 2},
		{"two held routes to the same target", "direct_hold", "out", 0},
		{"held route and an outbox route to the same target", "shared_outbox", "out", 1},
	}
	for _, c := range cases {
		doc := fmt.Sprintf(wiringDoc, "#", "a/#", "direct_hold", "edge", "b/#", c.send, c.modeB)
		n := 0
		for _, r := range rulesOf(t, doc) {
			if r == "direct-hold-shared-receiver" {
				n++
			}
		}
		if n != c.warnings {
			t.Errorf("%s: %d direct-hold-shared-receiver warnings, want %d (%v)", c.name, n, c.warnings, rulesOf(t, doc))
		}
	}
}
