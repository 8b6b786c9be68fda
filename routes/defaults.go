package routes

import (
	"cmp"
	"fmt"
	"time"
)

// DefaultQoS and DefaultSessionBatchSize are the defaults the bridge also
// needs for what it builds without a config field. Every other default is
// written once, in setDefaults; the README's config reference documents
// them (a test keeps the two in step).
const (
	DefaultQoS              = 1
	DefaultSessionBatchSize = 100
)

// setDefaults fills every unset field with its default. It is the only
// place defaults are applied: after it, every field the bridge reads holds
// the value that runs, and no component needs a default of its own.
// Type-specific options are filled only for their type. Session.DrainStrategy
// is always set: a drain_interval is folded into a fixed_poll strategy and
// DrainInterval is zeroed, so the bridge reads DrainStrategy only.
//
// A field written as 0 where 0 is meaningful (done_retention,
// max_replay_attempts, replay_budget, ttl) keeps it; where 0 is
// meaningless the default is filled in here and checkExplicitZeros reports
// the field, so the config is invalid either way (see the zero tags).
func (c *Config) setDefaults() {
	b := &c.Bridge
	if b.Admin.Listen == nil {
		l := "127.0.0.1:9090"
		b.Admin.Listen = &l
	}
	b.ShutdownTimeout = cmp.Or(b.ShutdownTimeout, Duration(30*time.Second))
	b.LeaseTTL = cmp.Or(b.LeaseTTL, Duration(15*time.Second))
	b.Log.Level = cmp.Or(b.Log.Level, "info")
	b.Log.Format = cmp.Or(b.Log.Format, "json")

	if o := c.Stores.Outbox; o != nil {
		switch o.Type {
		case "sqlite":
			o.Options.Path = cmp.Or(o.Options.Path, "./data/outbox.db")
			o.Options.Sync = cmp.Or(o.Options.Sync, "full")
			if !c.wroteZero("stores.outbox.options.done_retention") {
				o.Options.DoneRetention = cmp.Or(o.Options.DoneRetention, 100_000)
			}
		case "dynamodb":
			o.Options.Table = cmp.Or(o.Options.Table, "gobridge_outbox")
		}
	}

	for i := range c.Receivers {
		r := &c.Receivers[i]
		o := &r.Options
		o.ConnectTimeout = cmp.Or(o.ConnectTimeout, Duration(10*time.Second))
		o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, 262144)
		o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, 64<<20)
		switch r.Type {
		case ReceiverMQTT:
			o.ClientID = cmp.Or(o.ClientID, "gobridge-"+b.ID)
			o.KeepAlive = cmp.Or(o.KeepAlive, Duration(30*time.Second))
		case ReceiverMQTTListener:
			o.Listen = cmp.Or(o.Listen, "127.0.0.1:1883")
			o.MaxClients = cmp.Or(o.MaxClients, 1024)
			o.SessionExpiry = cmp.Or(o.SessionExpiry, Duration(time.Hour))
		case ReceiverHTTPListener:
			o.Listen = cmp.Or(o.Listen, "127.0.0.1:8080")
			o.MaxInFlight = cmp.Or(o.MaxInFlight, 256)
			o.SettleTimeout = cmp.Or(o.SettleTimeout, Duration(30*time.Second))
			o.ReadTimeout = cmp.Or(o.ReadTimeout, Duration(30*time.Second))
			o.WriteTimeout = cmp.Or(o.WriteTimeout, Duration(60*time.Second))
			o.MaxBatchLines = cmp.Or(o.MaxBatchLines, 1000)
			o.MaxBatchBytes = cmp.Or(o.MaxBatchBytes, 4<<20)
		}
		for j := range r.Topics {
			if r.Topics[j].QoS == nil && r.Type != ReceiverHTTPListener { // no QoS over HTTP
				q := DefaultQoS
				r.Topics[j].QoS = &q
			}
		}
	}

	for i := range c.Senders {
		s := &c.Senders[i]
		switch s.Type {
		case SenderSQS:
			s.Options.BatchSize = cmp.Or(s.Options.BatchSize, 10)
		case SenderHTTP:
			s.Options.Method = cmp.Or(s.Options.Method, "POST")
			s.Options.Timeout = cmp.Or(s.Options.Timeout, Duration(5*time.Second))
		}
	}

	// Without an outbox store there is no dead-letter queue: settle by drop.
	settle := PolicyDLQ
	if c.Stores.Outbox == nil {
		settle = PolicyDrop
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		r.DeliveryMode = cmp.Or(r.DeliveryMode, DirectHold)
		if r.AckAfter == "" && r.DeliveryMode != DirectOrOutbox {
			r.AckAfter = AckTargetAccept
			if r.DeliveryMode == SharedOutbox {
				r.AckAfter = AckOutboxPersist
			}
		}
		s := &r.Session
		s.Partitions = cmp.Or(s.Partitions, 1)
		if s.DrainStrategy == nil {
			s.DrainStrategy = &DrainStrategy{Type: DrainFixedPoll, Interval: cmp.Or(s.DrainInterval, Duration(time.Second))}
			s.DrainInterval = 0
		}
		ds := s.DrainStrategy
		ds.Type = cmp.Or(ds.Type, DrainFixedPoll)
		switch ds.Type {
		case DrainFixedPoll:
			ds.Interval = cmp.Or(ds.Interval, Duration(time.Second))
		case DrainAdaptiveBackoff:
			ds.MinInterval = cmp.Or(ds.MinInterval, Duration(100*time.Millisecond))
			ds.MaxInterval = cmp.Or(ds.MaxInterval, Duration(30*time.Second))
			ds.Multiplier = cmp.Or(ds.Multiplier, 2.0)
		}
		s.BatchSize = cmp.Or(s.BatchSize, DefaultSessionBatchSize)

		p := &r.Policy
		p.MaxInFlight = cmp.Or(p.MaxInFlight, 100)
		p.MaxOutboxDepth = cmp.Or(p.MaxOutboxDepth, 10_000_000)
		p.MaxOutboxBytes = cmp.Or(p.MaxOutboxBytes, 1<<30)
		p.MaxDeadLetters = cmp.Or(p.MaxDeadLetters, 100_000)
		p.StallAfter = cmp.Or(p.StallAfter, Duration(10*time.Minute))
		// 0 is meaningful for these two (see Policy): only a field left out
		// takes the default.
		if !c.wroteZero(fmt.Sprintf("routes[%d].policy.max_replay_attempts", i)) {
			p.MaxReplayAttempts = cmp.Or(p.MaxReplayAttempts, 5)
		}
		if !c.wroteZero(fmt.Sprintf("routes[%d].policy.replay_budget", i)) {
			p.ReplayBudget = cmp.Or(p.ReplayBudget, Duration(15*time.Minute))
		}
		p.SendTimeout = cmp.Or(p.SendTimeout, Duration(30*time.Second))
		p.DirectTimeout = cmp.Or(p.DirectTimeout, Duration(2*time.Second))
		p.OnExpired = cmp.Or(p.OnExpired, settle)
		p.OnPermanentFailure = cmp.Or(p.OnPermanentFailure, settle)
		p.Backoff.InitialInterval = cmp.Or(p.Backoff.InitialInterval, Duration(time.Second))
		p.Backoff.MaxInterval = cmp.Or(p.Backoff.MaxInterval, Duration(30*time.Second))
		p.Backoff.Multiplier = cmp.Or(p.Backoff.Multiplier, 2.0)
	}
}
