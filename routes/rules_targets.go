package routes

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/topics"
)

// Rules about what a route promises its target: order, duplicates, and
// what a delivery mode can do at all.

// SQS message attributes (senders/sqs sends every header as one).
const (
	// SQSMaxAttributes is the most message attributes SQS takes per message.
	SQSMaxAttributes = 10
	// SQSIDAttribute carries the envelope ID on every message.
	SQSIDAttribute = "gobridge-id"
)

// SQSAttributeNameProblem returns why SQS would refuse name as a message
// attribute name, or "".
func SQSAttributeNameProblem(name string) string {
	switch {
	case name == "":
		return "empty name"
	case len(name) > 256:
		return "longer than 256 characters"
	case strings.HasPrefix(strings.ToLower(name), "aws.") || strings.HasPrefix(strings.ToLower(name), "amazon."):
		return "names starting with AWS. or Amazon. are reserved"
	case name[0] == '.' || name[len(name)-1] == '.' || strings.Contains(name, ".."):
		return "a name must not start or end with a period or hold two in a row"
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return fmt.Sprintf("character %q (allowed: letters, digits, _ - .)", c)
		}
	}
	return ""
}

// checkSQSHeaders reports the set_headers of route r (at path) that no
// message could carry to the SQS sender s, which sends every header as a
// message attribute: a name SQS refuses, or more attributes than SQS takes,
// would fail every message.
func (c *Config) checkSQSHeaders(add func(Problem), path string, r RouteConfig, s *SenderConfig) {
	names := map[string]bool{SQSIDAttribute: true}
	for n := range s.Options.Attributes {
		names[n] = true
	}
	for j, p := range r.Processors {
		if p.Type != "set_headers" {
			continue
		}
		for _, n := range slices.Sorted(maps.Keys(p.Headers)) {
			why := SQSAttributeNameProblem(n)
			if n == SQSIDAttribute {
				why = "the name is reserved for the envelope ID, which would replace the header's value"
			}
			if why != "" && n != "" {
				pp := fmt.Sprintf("%s.processors[%d].headers", path, j)
				add(c.Errorf(pp, "sqs-attributes", "%s: header %q cannot be a message attribute of the sqs sender %q, which sends every header as one: %s", pp, n, s.ID, why))
			}
			names[n] = true
		}
	}
	if len(names) > SQSMaxAttributes {
		add(c.Errorf(path, "sqs-attributes", "%s: route %q sets %d message attributes for the sqs sender %q (its set_headers, the sender's attributes and %s), SQS takes at most %d: every message would fail",
			path, r.ID, len(names), s.ID, SQSIDAttribute, SQSMaxAttributes))
	}
}

// isFIFOQueue reports whether an SQS queue URL names a FIFO queue.
func isFIFOQueue(url string) bool { return strings.HasSuffix(strings.TrimSuffix(url, "/"), ".fifo") }

// checkTargets runs the rules of this file.
func (c *Config) checkTargets(add func(Problem)) {
	c.checkFIFOFanOut(add)
	for i, r := range c.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		hasKey := false
		for j, p := range r.Processors {
			switch p.Type {
			case "idempotency_key":
				hasKey = true
			case "coalesce":
				if r.DeliveryMode == DirectHold {
					pp := fmt.Sprintf("%s.processors[%d].type", path, j)
					add(c.Errorf(pp, "coalesce-direct-hold",
						"%s: coalesce replaces pending records of the route's backlog, and a direct_hold route has no backlog to coalesce: it holds its source until the target accepts each message; use delivery_mode: shared_outbox, or remove the processor", pp))
				}
			}
		}
		s := byID(c.Senders, senderID, r.Sender)
		c.checkPlaceholders(add, i, r, s)
		if s == nil {
			continue // unknown-sender reports it
		}
		if s.Type == SenderSQS {
			c.checkSQSHeaders(add, path, r, s)
		}
		fifo := s.Type == SenderSQS && isFIFOQueue(s.Options.QueueURL)
		if fifo && r.OrderingKey == "" {
			add(c.Warnf(path, "fifo-unordered",
				"%s: route %q sends to the FIFO queue of sender %q without an ordering_key: records are sent concurrently, so SQS can receive them out of order within a message group; set ordering_key (for example to the message_group_id, %q) to keep each group in order",
				path, r.ID, s.ID, cmp.Or(s.Options.MessageGroupID, "{topic}")))
		}
		if rcv := byID(c.Receivers, receiverID, r.Receiver); hasKey || (rcv != nil && rcv.Type == ReceiverHTTPListener) {
			continue // http_listener: the producer's Idempotency-Key is the ID
		}
		var dedup string
		switch {
		case fifo:
			dedup = "the FIFO queue deduplicates on the envelope ID (MessageDeduplicationId)"
		case s.Type == SenderHTTP:
			dedup = "the http sender passes the envelope ID as the Idempotency-Key header"
		default:
			continue
		}
		add(c.Warnf(path, "no-idempotency-key",
			"%s: route %q has no idempotency_key processor, but %s: every delivery gets a fresh envelope ID, so a message the broker redelivers (after a crash or a lost acknowledgement) reaches %q as a new message; add {type: idempotency_key, from: \"{payload.msg_id}\"} (a message id of the producer) or {type: idempotency_key, hash: true}",
			path, r.ID, dedup, s.ID))
	}
}

// checkFIFOFanOut warns about two routes that can take the same message
// (one receiver, overlapping topics) to one FIFO queue: both copies carry
// the same envelope ID as MessageDeduplicationId, and SQS keeps only the
// first within its 5-minute deduplication window, reporting both sent.
func (c *Config) checkFIFOFanOut(add func(Problem)) {
	queue := func(r RouteConfig) string {
		if s := byID(c.Senders, senderID, r.Sender); s != nil && s.Type == SenderSQS && isFIFOQueue(s.Options.QueueURL) {
			return s.Options.QueueURL
		}
		return ""
	}
	for j, b := range c.Routes {
		for _, a := range c.Routes[:j] {
			if q := queue(a); q != "" && q == queue(b) && a.Receiver == b.Receiver && topics.Overlaps(a.Topic, b.Topic) {
				path := fmt.Sprintf("routes[%d]", j)
				add(c.Warnf(path, "fifo-fan-out",
					"%s: routes %q and %q can take the same message to the FIFO queue %s with the same MessageDeduplicationId (its envelope ID): SQS keeps the first copy and drops the other within its 5-minute deduplication window, while both count as sent; send them to different queues, or make their topics disjoint",
					path, a.ID, b.ID, q))
				break
			}
		}
	}
}
