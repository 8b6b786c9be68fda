package routes

import (
	"cmp"
	"fmt"
	"time"
)

// Default values, documented in the README's config reference (a test keeps
// the two in step).
const (
	DefaultAdminListen      = "127.0.0.1:9090"
	DefaultListenerAddr     = "127.0.0.1:1883"
	DefaultHTTPListenerAddr = "127.0.0.1:8080"
	DefaultHTTPMaxInFlight  = 256
	DefaultSettleTimeout    = 30 * time.Second
	DefaultReadTimeout      = 30 * time.Second
	DefaultWriteTimeout     = 60 * time.Second
	DefaultMaxBatchLines    = 1000
	DefaultMaxBatchBytes    = 4 << 20
	DefaultSQLitePath       = "./data/outbox.db"
	DefaultDoneRetention    = 100_000
	DefaultOutboxTable      = "gobridge_outbox"
	DefaultClientIDPrefix   = "gobridge-"
	DefaultShutdownTimeout  = 30 * time.Second
	DefaultLeaseTTL         = 15 * time.Second
	DefaultKeepAlive        = 30 * time.Second
	DefaultConnectTimeout   = 10 * time.Second
	DefaultHTTPTimeout      = 5 * time.Second
	DefaultDrainInterval    = time.Second
	DefaultAdaptiveMin      = 100 * time.Millisecond
	DefaultAdaptiveMax      = 30 * time.Second
	DefaultStallAfter       = 10 * time.Minute
	DefaultReplayBudget     = 15 * time.Minute
	DefaultSendTimeout      = 30 * time.Second
	DefaultDirectTimeout    = 2 * time.Second
	DefaultBackoffInitial   = time.Second
	DefaultBackoffMax       = 30 * time.Second
	DefaultMultiplier       = 2.0
	DefaultQoS              = 1
	DefaultSQSBatchSize     = 10
	DefaultSessionBatchSize = 100
	DefaultMaxInFlight      = 100
	DefaultMaxOutboxDepth   = 10_000_000
	DefaultMaxOutboxBytes   = 1 << 30
	DefaultMaxDeadLetters   = 100_000
	DefaultMaxReplay        = 5
	DefaultMaxPayloadBytes  = 262144
	DefaultMaxInflightBytes = 64 << 20
	DefaultMaxClients       = 1024
	DefaultSessionExpiry    = time.Hour
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
// the field, so the config is invalid either way (see zeroFields).
func (c *Config) setDefaults() {
	b := &c.Bridge
	if b.Admin.Listen == nil {
		l := DefaultAdminListen
		b.Admin.Listen = &l
	}
	b.ShutdownTimeout = cmp.Or(b.ShutdownTimeout, Duration(DefaultShutdownTimeout))
	b.LeaseTTL = cmp.Or(b.LeaseTTL, Duration(DefaultLeaseTTL))
	b.Log.Level = cmp.Or(b.Log.Level, "info")
	b.Log.Format = cmp.Or(b.Log.Format, "json")

	if o := c.Stores.Outbox; o != nil {
		switch o.Type {
		case "sqlite":
			o.Options.Path = cmp.Or(o.Options.Path, DefaultSQLitePath)
			o.Options.Sync = cmp.Or(o.Options.Sync, "full")
			if !c.wroteZero("stores.outbox.options.done_retention") {
				o.Options.DoneRetention = cmp.Or(o.Options.DoneRetention, DefaultDoneRetention)
			}
		case "dynamodb":
			o.Options.Table = cmp.Or(o.Options.Table, DefaultOutboxTable)
		}
	}

	for i := range c.Receivers {
		r := &c.Receivers[i]
		o := &r.Options
		o.ConnectTimeout = cmp.Or(o.ConnectTimeout, Duration(DefaultConnectTimeout))
		o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, DefaultMaxPayloadBytes)
		o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, DefaultMaxInflightBytes)
		switch r.Type {
		case ReceiverMQTT:
			o.ClientID = cmp.Or(o.ClientID, DefaultClientIDPrefix+b.ID)
			o.KeepAlive = cmp.Or(o.KeepAlive, Duration(DefaultKeepAlive))
		case ReceiverMQTTListener:
			o.Listen = cmp.Or(o.Listen, DefaultListenerAddr)
			o.MaxClients = cmp.Or(o.MaxClients, DefaultMaxClients)
			o.SessionExpiry = cmp.Or(o.SessionExpiry, Duration(DefaultSessionExpiry))
		case ReceiverHTTPListener:
			o.Listen = cmp.Or(o.Listen, DefaultHTTPListenerAddr)
			o.MaxInFlight = cmp.Or(o.MaxInFlight, DefaultHTTPMaxInFlight)
			o.SettleTimeout = cmp.Or(o.SettleTimeout, Duration(DefaultSettleTimeout))
			o.ReadTimeout = cmp.Or(o.ReadTimeout, Duration(DefaultReadTimeout))
			o.WriteTimeout = cmp.Or(o.WriteTimeout, Duration(DefaultWriteTimeout))
			o.MaxBatchLines = cmp.Or(o.MaxBatchLines, DefaultMaxBatchLines)
			o.MaxBatchBytes = cmp.Or(o.MaxBatchBytes, DefaultMaxBatchBytes)
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
			s.Options.BatchSize = cmp.Or(s.Options.BatchSize, DefaultSQSBatchSize)
		case SenderHTTP:
			s.Options.Method = cmp.Or(s.Options.Method, "POST")
			s.Options.Timeout = cmp.Or(s.Options.Timeout, Duration(DefaultHTTPTimeout))
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
			s.DrainStrategy = &DrainStrategy{Type: DrainFixedPoll, Interval: cmp.Or(s.DrainInterval, Duration(DefaultDrainInterval))}
			s.DrainInterval = 0
		}
		ds := s.DrainStrategy
		ds.Type = cmp.Or(ds.Type, DrainFixedPoll)
		switch ds.Type {
		case DrainFixedPoll:
			ds.Interval = cmp.Or(ds.Interval, Duration(DefaultDrainInterval))
		case DrainAdaptiveBackoff:
			ds.MinInterval = cmp.Or(ds.MinInterval, Duration(DefaultAdaptiveMin))
			ds.MaxInterval = cmp.Or(ds.MaxInterval, Duration(DefaultAdaptiveMax))
			ds.Multiplier = cmp.Or(ds.Multiplier, DefaultMultiplier)
		}
		s.BatchSize = cmp.Or(s.BatchSize, DefaultSessionBatchSize)

		p := &r.Policy
		p.MaxInFlight = cmp.Or(p.MaxInFlight, DefaultMaxInFlight)
		p.MaxOutboxDepth = cmp.Or(p.MaxOutboxDepth, DefaultMaxOutboxDepth)
		p.MaxOutboxBytes = cmp.Or(p.MaxOutboxBytes, DefaultMaxOutboxBytes)
		p.MaxDeadLetters = cmp.Or(p.MaxDeadLetters, DefaultMaxDeadLetters)
		p.StallAfter = cmp.Or(p.StallAfter, Duration(DefaultStallAfter))
		// 0 is meaningful for these two (see Policy): only a field left out
		// takes the default.
		if !c.wroteZero(fmt.Sprintf("routes[%d].policy.max_replay_attempts", i)) {
			p.MaxReplayAttempts = cmp.Or(p.MaxReplayAttempts, DefaultMaxReplay)
		}
		if !c.wroteZero(fmt.Sprintf("routes[%d].policy.replay_budget", i)) {
			p.ReplayBudget = cmp.Or(p.ReplayBudget, Duration(DefaultReplayBudget))
		}
		p.SendTimeout = cmp.Or(p.SendTimeout, Duration(DefaultSendTimeout))
		p.DirectTimeout = cmp.Or(p.DirectTimeout, Duration(DefaultDirectTimeout))
		p.OnExpired = cmp.Or(p.OnExpired, settle)
		p.OnPermanentFailure = cmp.Or(p.OnPermanentFailure, settle)
		p.Backoff.InitialInterval = cmp.Or(p.Backoff.InitialInterval, Duration(DefaultBackoffInitial))
		p.Backoff.MaxInterval = cmp.Or(p.Backoff.MaxInterval, Duration(DefaultBackoffMax))
		p.Backoff.Multiplier = cmp.Or(p.Backoff.Multiplier, DefaultMultiplier)
	}
}
