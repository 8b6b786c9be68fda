package routes

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/topics"
)

// Rules about placeholders that no message of a route can fill, so that
// every message of the route would fail.

// routeTemplate is one template a route's messages are rendered with.
type routeTemplate struct {
	path  string
	t     *message.Template
	whose string // " (sender \"ID\")" for a sender's template, else ""
	step  int    // the processor that renders it; len(processors) after them
}

// routeTemplates lists the templates of route r (routes[i]) and of its
// sender s (nil: none) that parse, in the order a message meets them.
func (c *Config) routeTemplates(i int, r RouteConfig, s *SenderConfig) []routeTemplate {
	var out []routeTemplate
	add := func(path, tmpl, whose string, step int) {
		if t, err := message.ParseTemplate(tmpl); err == nil && tmpl != "" { // checkTemplate reports a bad one
			out = append(out, routeTemplate{path, t, whose, step})
		}
	}
	each := func(path string, m map[string]string, whose string, step int) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			add(path+"."+k, m[k], whose, step)
		}
	}
	route, after := fmt.Sprintf("routes[%d]", i), len(r.Processors)
	for j, p := range r.Processors {
		pp := fmt.Sprintf("%s.processors[%d]", route, j)
		add(pp+".from", p.From, "", j)
		add(pp+".key", p.Key, "", j)
		each(pp+".headers", p.Headers, "", j)
	}
	add(route+".ordering_key", r.OrderingKey, "", after)
	if s == nil {
		return out
	}
	sp := fmt.Sprintf("senders[%d].options", slices.IndexFunc(c.Senders, func(x SenderConfig) bool { return x.ID == s.ID }))
	whose := fmt.Sprintf(" (sender %q)", s.ID)
	add(sp+".url", s.Options.URL, whose, after)
	add(sp+".message_group_id", s.Options.MessageGroupID, whose, after)
	each(sp+".headers", s.Options.Headers, whose, after)
	each(sp+".attributes", s.Options.Attributes, whose, after)
	return out
}

// checkPlaceholders reports, in a template of route r (routes[i]) or of
// its sender s, a {topic.N} beyond the levels of the route's topic (a
// filter without '#' fixes how many its topics have), and a {header.NAME}
// no message can carry there: MQTT receivers bring no headers, an
// http_listener only those of its options.headers (and Content-Type), and
// set_headers processors only to the processors after them.
func (c *Config) checkPlaceholders(add func(Problem), i int, r RouteConfig, s *SenderConfig) {
	filter, levels := TopicLevels(r.Topic)
	// The outbox appends idempotently on the ID; so do HTTP targets
	// (Idempotency-Key) and SQS FIFO queues.
	dedup := r.UsesOutbox() || s != nil && (s.Type == SenderHTTP || s.Type == SenderSQS && isFIFOQueue(s.Options.QueueURL))
	for j, p := range r.Processors {
		if p.Type == "idempotency_key" && p.From != "" && dedup && constantFor(p.From, filter) {
			path := fmt.Sprintf("routes[%d].processors[%d].from", i, j)
			add(c.Errorf(path, "idempotency-constant", "%s: %q gives every message of route %q (topic %q) the same ID, so the outbox, and a target that deduplicates on it (HTTP Idempotency-Key, SQS FIFO), drop each one after the first as a duplicate; use a field that differs per message, such as {payload.msg_id}, or hash: true",
				path, p.From, r.ID, r.Topic))
		}
	}
	rcv := byID(c.Receivers, receiverID, r.Receiver)
	for _, rt := range c.routeTemplates(i, r, s) {
		if n := rt.t.MaxTopicSegment(); levels >= 0 && n >= levels {
			add(c.Errorf(rt.path, "topic-segment", "%s: {topic.%d}%s can never be filled: the topics of route %q (%q) have %d levels, {topic.0} to {topic.%d}, so every message would fail",
				rt.path, n, rt.whose, r.ID, r.Topic, levels, levels-1))
		}
		if rcv == nil {
			continue
		}
		for _, h := range rt.t.HeaderNames() {
			if !headerCarried(*rcv, r.Processors[:rt.step], h) {
				add(c.Errorf(rt.path, "header-placeholder", "%s: {header.%s}%s can never be filled on route %q: %s, and no set_headers processor before it sets %s, so every message would fail",
					rt.path, h, rt.whose, r.ID, receiverHeaders(*rcv), h))
				break
			}
		}
	}
}

// TopicLevels returns route topic filter without a $share/GROUP/ prefix,
// and how many levels every topic it matches has: -1 when that is not
// fixed (a '#', or a filter that is not valid).
func TopicLevels(filter string) (string, int) {
	valid := filter != "" && topics.ValidateFilter(filter) == nil
	if strings.HasPrefix(filter, "$share/") {
		_, filter, _ = strings.Cut(strings.TrimPrefix(filter, "$share/"), "/")
	}
	if !valid || strings.HasSuffix(filter, "#") {
		return filter, -1
	}
	return filter, strings.Count(filter, "/") + 1
}

// headerCarried reports whether a message of receiver rcv can carry header
// name after processors ps.
func headerCarried(rcv ReceiverConfig, ps []ProcessorConfig, name string) bool {
	has := func(names []string) bool {
		return slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, name) })
	}
	for _, p := range ps {
		if p.Type == "set_headers" && has(slices.Collect(maps.Keys(p.Headers))) {
			return true
		}
	}
	return rcv.Type == ReceiverHTTPListener && has(append([]string{"Content-Type"}, rcv.Options.Headers...))
}

// receiverHeaders says which headers receiver rcv brings.
func receiverHeaders(rcv ReceiverConfig) string {
	if rcv.Type != ReceiverHTTPListener {
		return fmt.Sprintf("receiver %q (%s) brings no headers", rcv.ID, rcv.Type)
	}
	return fmt.Sprintf("receiver %q brings only Content-Type and the headers of its options.headers", rcv.ID)
}

// constantFor reports whether template tmpl renders one value for every
// message whose topic matches filter (no $share prefix): it fills in only
// literal text and topic levels the filter fixes. It renders tmpl for two
// messages that differ in every wildcard level and in their ID, headers
// and payload.
func constantFor(tmpl, filter string) bool {
	t, err := message.ParseTemplate(tmpl)
	if err != nil || topics.ValidateFilter(filter) != nil {
		return false
	}
	var got []string
	for _, v := range []string{"a", "b"} {
		levels := strings.Split(filter, "/")
		for k, l := range levels {
			if l == "+" || l == "#" {
				levels[k] = v
			}
		}
		e := &message.Envelope{ID: v, Topic: strings.Join(levels, "/"), Payload: []byte(v)}
		out, err := t.Render(e, nil)
		if err != nil {
			return false
		}
		got = append(got, out)
	}
	return got[0] == got[1]
}
