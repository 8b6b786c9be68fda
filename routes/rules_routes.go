package routes

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gobridge/gobridge/topics"
)

// processorOptions lists the options each processor type reads.
var processorOptions = map[string][]string{
	"filter":          {"expr"},
	"transform":       {"expr"},
	"set_headers":     {"headers"},
	"idempotency_key": {"from", "hash"},
	"coalesce":        {"key"},
}

func (c *Config) checkRoutes(add func(Problem)) {
	routeIDs := ids(c.Routes, routeID)
	c.checkDuplicateIDs(add, "routes", routeIDs)

	var memoryRoutes []string
	previous := map[string]int{}
	for i, r := range c.Routes {
		path := fmt.Sprintf("routes[%d]", i)
		for j, old := range r.PreviousIDs {
			pp := fmt.Sprintf("%s.previous_ids[%d]", path, j)
			switch k, dup := previous[old]; {
			case slices.Contains(routeIDs, old):
				add(c.Errorf(pp, "previous-id", "%s: %q is the id of a route of this configuration, so it cannot be a previous id", pp, old))
			case dup:
				add(c.Errorf(pp, "previous-id", "%s: %q is already a previous id of routes[%d]: the records of one old route go to one route", pp, old, k))
			case !r.UsesOutbox():
				add(c.Errorf(pp, "previous-id", "%s: previous ids take over outbox records, and %s does not use the outbox", pp, r.DeliveryMode))
			}
			previous[old] = i
		}
		rcv := byID(c.Receivers, receiverID, r.Receiver)
		if r.Receiver != "" && rcv == nil {
			add(c.Errorf(path+".receiver", "unknown-receiver", "%s.receiver: no receiver has id %q (receivers: %s)", path, r.Receiver, idList(ids(c.Receivers, receiverID))))
		}
		if r.Sender != "" && byID(c.Senders, senderID, r.Sender) == nil {
			add(c.Errorf(path+".sender", "unknown-sender", "%s.sender: no sender has id %q (senders: %s)", path, r.Sender, idList(ids(c.Senders, senderID))))
		}
		if r.Topic != "" {
			if err := topics.ValidateFilter(r.Topic); err != nil {
				add(c.Errorf(path+".topic", "topic-filter", "%s.topic: %v", path, err))
			} else if rcv != nil && !coveredBy(rcv, r.Topic) {
				add(c.Errorf(path+".topic", "topic-not-covered", "%s.topic %q is not covered by any subscription of receiver %q (%s)",
					path, r.Topic, rcv.ID, subscriptionList(rcv)))
			}
		}
		c.checkProcessors(add, path, r.Processors)
		c.checkDelivery(add, path, r)
		if r.UsesOutbox() && c.Stores.Outbox != nil && c.Stores.Outbox.Type == "memory" {
			memoryRoutes = append(memoryRoutes, r.ID)
		}
		c.checkSession(add, path, r.Session)
		c.checkBackoff(add, path+".policy.backoff", r.Policy.Backoff)
	}
	if len(memoryRoutes) > 0 {
		add(c.Warnf("stores.outbox.type", "memory-outbox",
			"route(s) %s write to a memory outbox: pending records die with the process; use sqlite or dynamodb", idList(memoryRoutes)))
	}
}

func coveredBy(rcv *ReceiverConfig, topic string) bool {
	return slices.ContainsFunc(rcv.Topics, func(s Subscription) bool {
		return topics.ValidateFilter(s.Topic) == nil && topics.Covers(s.Topic, topic)
	})
}

func subscriptionList(rcv *ReceiverConfig) string {
	if len(rcv.Topics) == 0 {
		return "it has no subscriptions"
	}
	quoted := ids(rcv.Topics, func(s Subscription) string { return strconv.Quote(s.Topic) })
	return "it subscribes to " + strings.Join(quoted, ", ")
}

// ids lists the id (idOf) of every element of list, in order.
func ids[T any](list []T, idOf func(T) string) []string {
	out := make([]string, len(list))
	for i, x := range list {
		out[i] = idOf(x)
	}
	return out
}

// byID returns the first element of list whose id (idOf) is id, nil when
// there is none or id is "".
func byID[T any](list []T, idOf func(T) string, id string) *T {
	if i := slices.IndexFunc(list, func(x T) bool { return idOf(x) == id }); i >= 0 && id != "" {
		return &list[i]
	}
	return nil
}

func receiverID(r ReceiverConfig) string { return r.ID }
func senderID(s SenderConfig) string     { return s.ID }
func routeID(r RouteConfig) string       { return r.ID }

// idList quotes the non-empty ids for messages: "a", "b"; none when there is none.
func idList(ids []string) string {
	var q []string
	for _, id := range ids {
		if id != "" {
			q = append(q, strconv.Quote(id))
		}
	}
	return cmp.Or(strings.Join(q, ", "), "none")
}

func (c *Config) checkProcessors(add func(Problem), route string, ps []ProcessorConfig) {
	for i, p := range ps {
		path := fmt.Sprintf("%s.processors[%d]", route, i)
		c.checkOptions(add, path, "processor", p.Type, p, processorOptions)
		// Every type but idempotency_key takes one option, which it needs.
		missing := map[string]bool{"filter": p.Expr == "", "transform": p.Expr == "", "set_headers": len(p.Headers) == 0, "coalesce": p.Key == ""}
		switch opt := processorOptions[p.Type]; {
		case missing[p.Type]:
			add(c.Errorf(path+"."+opt[0], "required", "%s.%s is required for a %s processor", path, opt[0], p.Type))
		case p.Type == "idempotency_key" && p.From == "" && !p.Hash:
			add(c.Errorf(path, "required", "%s: an idempotency_key processor needs from (a template) or hash: true", path))
		case p.Type == "idempotency_key" && p.From != "" && p.Hash:
			add(c.Errorf(path+".hash", "option", "%s: from and hash: true are exclusive; pick one", path))
		}
	}
}

// checkDelivery checks the delivery mode, the ack boundary and settlement.
func (c *Config) checkDelivery(add func(Problem), path string, r RouteConfig) {
	if r.UsesOutbox() {
		if c.Stores.Outbox == nil {
			add(c.Errorf(path+".delivery_mode", "outbox-required",
				"%s: delivery_mode %s needs stores.outbox (sqlite, or dynamodb for several instances)", path, r.DeliveryMode))
		}
		if r.Session.ID == "" {
			add(c.Errorf(path+".session.id", "session-required",
				"%s.session.id is required for delivery_mode %s (routes may share a session)", path, r.DeliveryMode))
		}
	}
	switch r.DeliveryMode {
	case DirectOrOutbox:
		if r.AckAfter != "" {
			add(c.Errorf(path+".ack_after", "ack-after",
				"%s: ack_after does not apply to direct_or_outbox, which acknowledges once the target accepted the message or, when it did not, once the outbox holds it; remove ack_after", path))
		}
	case SharedOutbox:
		if r.AckAfter == AckTargetAccept {
			add(c.Errorf(path+".ack_after", "ack-after",
				"%s: ack_after target_accept can never be honoured on a shared_outbox route (the outbox acknowledges on persist); use delivery_mode: direct_hold to acknowledge after the target accepts, or ack_after: outbox_persist", path))
		}
	case DirectHold:
		if r.AckAfter == AckOutboxPersist {
			add(c.Errorf(path+".ack_after", "ack-after",
				"%s: ack_after outbox_persist needs delivery_mode: shared_outbox (a direct_hold route has no outbox); use ack_after: target_accept or delivery_mode: shared_outbox", path))
		}
	}
	if c.Stores.Outbox == nil {
		var defaulted []string
		for _, f := range []struct{ key, val string }{
			{"on_expired", r.Policy.OnExpired},
			{"on_permanent_failure", r.Policy.OnPermanentFailure},
		} {
			fp := path + ".policy." + f.key
			switch {
			case f.val == PolicyDLQ:
				add(c.Errorf(fp, "dlq-without-outbox",
					"%s.policy.%s is dlq but there is no stores.outbox to hold dead letters; configure stores.outbox or use drop", path, f.key))
			case f.val == PolicyDrop && !c.Has(fp):
				defaulted = append(defaulted, f.key)
			}
		}
		if len(defaulted) > 0 {
			verb := "defaults"
			if len(defaulted) > 1 {
				verb = "default"
			}
			add(c.Warnf(path+".policy", "drop-without-outbox",
				"%s: there is no stores.outbox, so policy.%s %s to drop: such messages are discarded and counted, not kept; set drop explicitly or configure stores.outbox",
				path, strings.Join(defaulted, " and policy."), verb))
		}
	}
}

func (c *Config) checkSession(add func(Problem), route string, s Session) {
	path := route + ".session"
	if s.DrainInterval != 0 {
		// setDefaults folds a lone drain_interval into drain_strategy.
		add(c.Errorf(path+".drain_interval", "drain-exclusive",
			"%s: drain_interval and drain_strategy are exclusive; drain_interval is shorthand for drain_strategy {type: fixed_poll, interval: %s}", path, s.DrainInterval))
	}
	ds := s.DrainStrategy
	if ds == nil {
		return
	}
	dp := path + ".drain_strategy"
	switch ds.Type {
	case DrainFixedPoll:
		for _, f := range []struct {
			key string
			set bool
		}{{"min_interval", ds.MinInterval != 0}, {"max_interval", ds.MaxInterval != 0}, {"multiplier", ds.Multiplier != 0}} {
			if f.set {
				add(c.Errorf(dp+"."+f.key, "option", "%s.%s applies to adaptive_backoff only", dp, f.key))
			}
		}
	case DrainAdaptiveBackoff:
		if ds.Interval != 0 {
			add(c.Errorf(dp+".interval", "option", "%s.interval applies to fixed_poll only; use min_interval and max_interval", dp))
		}
		if ds.Multiplier <= 1 {
			add(c.Errorf(dp+".multiplier", "multiplier", "%s.multiplier must be greater than 1; got %g", dp, ds.Multiplier))
		}
		if ds.MinInterval > ds.MaxInterval {
			add(c.Errorf(dp+".min_interval", "interval-order", "%s: min_interval %s is greater than max_interval %s", dp, ds.MinInterval, ds.MaxInterval))
		}
	}
}

func (c *Config) checkBackoff(add func(Problem), path string, b Backoff) {
	if b.InitialInterval > b.MaxInterval {
		add(c.Errorf(path+".initial_interval", "interval-order", "%s: initial_interval %s is greater than max_interval %s", path, b.InitialInterval, b.MaxInterval))
	}
}

// drainFields are the settings that every route of a session must agree
// on, because one drainer serves the whole session.
var drainFields = []struct {
	path  string // YAML path within the route
	value func(r RouteConfig) string
}{
	{"policy.send_timeout", func(r RouteConfig) string { return r.Policy.SendTimeout.String() }},
	{"policy.max_replay_attempts", func(r RouteConfig) string { return fmt.Sprint(r.Policy.MaxReplayAttempts) }},
	{"policy.replay_budget", func(r RouteConfig) string { return r.Policy.ReplayBudget.String() }},
	{"policy.on_expired", func(r RouteConfig) string { return r.Policy.OnExpired }},
	{"policy.on_permanent_failure", func(r RouteConfig) string { return r.Policy.OnPermanentFailure }},
	{"session.drain_strategy", func(r RouteConfig) string { return r.Session.DrainStrategy.describe() }},
	{"session.batch_size", func(r RouteConfig) string { return fmt.Sprint(r.Session.BatchSize) }},
	{"policy.max_dead_letters", func(r RouteConfig) string { return fmt.Sprint(r.Policy.MaxDeadLetters) }},
	{"session.partitions", func(r RouteConfig) string { return fmt.Sprint(r.Session.Partitions) }},
}

// describe prints a drain strategy for messages.
func (d *DrainStrategy) describe() string {
	switch {
	case d == nil:
		return "default"
	case d.Type == DrainAdaptiveBackoff:
		return fmt.Sprintf("adaptive_backoff %s..%s x%g", d.MinInterval, d.MaxInterval, d.Multiplier)
	default:
		return fmt.Sprintf("%s every %s", d.Type, d.Interval)
	}
}

// checkDivergentSessions reports every drain setting on which a
// shared_outbox route differs from the first route of its session,
// positioned at the later route's field.
func (c *Config) checkDivergentSessions(add func(Problem)) {
	first := map[string]int{}
	for i, r := range c.Routes {
		if !r.UsesOutbox() || r.Session.ID == "" {
			continue
		}
		j, seen := first[r.Session.ID]
		if !seen {
			first[r.Session.ID] = i
			continue
		}
		a := c.Routes[j]
		for _, f := range drainFields {
			va, vb := f.value(a), f.value(r)
			if va == vb {
				continue
			}
			field := f.path
			if field == "session.drain_strategy" && c.Has(fmt.Sprintf("routes[%d].session.drain_interval", i)) {
				field = "session.drain_interval"
			}
			if c.isBroken(fmt.Sprintf("routes[%d].%s", j, f.path)) {
				continue
			}
			add(c.Errorf(fmt.Sprintf("routes[%d].%s", i, field), "divergent-drain-policy",
				"routes %q and %q share session %q but differ in %s: %s (route %q) vs %s (route %q); one drainer serves a session, so they must agree",
				a.ID, r.ID, r.Session.ID, field, va, a.ID, vb, r.ID))
		}
	}
}
