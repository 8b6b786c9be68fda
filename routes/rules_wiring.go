package routes

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/topics"
)

// Rules about how receivers, routes and senders connect: nothing a
// receiver takes in may vanish unrouted, nothing configured may sit unused
// unnoticed, and one held route must not stall its neighbours.

// checkUnroutedSubscriptions reports every subscription that delivers no
// topic any route of its receiver takes: the bridge acknowledges such
// messages and discards them. A subscription is routed when some route
// topic overlaps it (Overlaps), so "factory/#" is routed by a route on
// "factory/+/alarms" even though most of what it delivers is not.
func (c *Config) checkUnroutedSubscriptions(add func(Problem)) {
	if slices.ContainsFunc(c.Routes, func(r RouteConfig) bool { return byID(c.Receivers, receiverID, r.Receiver) == nil }) {
		return // a route meant some receiver; do not guess which
	}
	for i, r := range c.Receivers {
		path := fmt.Sprintf("receivers[%d]", i)
		if r.ID == "" || c.isBroken(path) {
			continue
		}
		var filters []string
		unsure := false
		for j, rt := range c.Routes {
			if rt.Receiver != r.ID {
				continue
			}
			if topics.ValidateFilter(rt.Topic) != nil || c.isBroken(fmt.Sprintf("routes[%d].topic", j)) {
				unsure = true // reported on its own; do not guess
				continue
			}
			filters = append(filters, rt.Topic)
		}
		if unsure {
			continue
		}
		if len(filters) == 0 && len(r.Topics) > 0 {
			add(c.Errorf(path+".id", "unrouted-subscription",
				"%s: no route takes messages from receiver %q: everything it receives would be acknowledged and discarded; add a route with receiver: %s, or remove the receiver",
				path, r.ID, r.ID))
			continue
		}
		for j, s := range r.Topics {
			if topics.ValidateFilter(s.Topic) != nil {
				continue // the topic-filter rule reports it
			}
			if slices.ContainsFunc(filters, func(t string) bool { return topics.Overlaps(s.Topic, t) }) {
				continue
			}
			tp := fmt.Sprintf("%s.topics[%d].topic", path, j)
			add(c.Errorf(tp, "unrouted-subscription",
				"%s: no route of receiver %q matches any topic %q delivers (its routes: %s): such messages would be acknowledged and discarded; add a route for them or remove the subscription",
				tp, r.ID, s.Topic, idList(filters)))
		}
	}
}

// checkUnusedSenders warns about a sender no route sends to: it is not
// even started, which is seldom what its author meant.
func (c *Config) checkUnusedSenders(add func(Problem)) {
	if slices.ContainsFunc(c.Routes, func(r RouteConfig) bool { return byID(c.Senders, senderID, r.Sender) == nil }) {
		return // a route meant some sender; do not guess which
	}
	for i, s := range c.Senders {
		if s.ID == "" || slices.ContainsFunc(c.Routes, func(r RouteConfig) bool { return r.Sender == s.ID }) {
			continue
		}
		p := fmt.Sprintf("senders[%d].id", i)
		add(c.Warnf(p, "unused-sender", "%s: no route sends to sender %q, so it is never started; route messages to it or remove it", p, s.ID))
	}
}

// checkDirectHoldNeighbours warns about a direct_hold route that shares its
// receiver with other routes. Acknowledgements go back in arrival order on
// each connection, so while the held route waits for an unreachable
// target, every message that arrived after the held one stays
// unacknowledged too, whatever route it is for. Other direct_hold routes to
// the same sender are not counted: they stop with the same target anyway.
func (c *Config) checkDirectHoldNeighbours(add func(Problem)) {
	for i, r := range c.Routes {
		if r.DeliveryMode != DirectHold || r.Receiver == "" {
			continue
		}
		var others []string
		for j, o := range c.Routes {
			if j == i || o.Receiver != r.Receiver || (o.DeliveryMode == DirectHold && o.Sender == r.Sender) {
				continue
			}
			others = append(others, o.ID)
		}
		if len(others) == 0 {
			continue
		}
		p := fmt.Sprintf("routes[%d].receiver", i)
		add(c.Warnf(p, "direct-hold-shared-receiver",
			"%s: direct_hold route %q shares receiver %q with route(s) %s: acknowledgements go back in arrival order on each connection, so while %q holds a message for an unreachable target, the messages of the other routes that arrived after it stay unacknowledged too; give %q a receiver of its own (an mqtt receiver with its own client_id)",
			p, r.ID, r.Receiver, idList(others), r.ID, r.ID))
	}
}

// checkClientIDs reports two mqtt receivers with one client_id (set, or the
// default gobridge-BRIDGE_ID) and a broker address in common: the broker
// closes the older connection whenever the other connects (MQTT 3.1.1
// §3.1.4), so both reconnect for ever and messages go to the wrong
// receiver or are lost.
func (c *Config) checkClientIDs(add func(Problem)) {
	for j, b := range c.Receivers {
		for _, a := range c.Receivers[:j] {
			if a.Type != ReceiverMQTT || b.Type != ReceiverMQTT || a.Options.ClientID != b.Options.ClientID {
				continue
			}
			if h := commonBroker(a.Options.BrokerURLs, b.Options.BrokerURLs); h != "" {
				path := fmt.Sprintf("receivers[%d].options.client_id", j)
				add(c.Errorf(path, "client-id", "%s: receivers %q and %q both connect to %s as client %q: the broker closes one connection whenever the other connects, so neither stays up; give each its own client_id",
					path, a.ID, b.ID, h, b.Options.ClientID))
				break
			}
		}
	}
}

// commonBroker returns a host:port that broker URL lists a and b share, or "".
func commonBroker(a, b []string) string {
	for _, x := range a {
		ux, err := url.Parse(x)
		for _, y := range b {
			if uy, err2 := url.Parse(y); err == nil && err2 == nil && ux.Host != "" && strings.EqualFold(ux.Host, uy.Host) {
				return ux.Host
			}
		}
	}
	return ""
}
