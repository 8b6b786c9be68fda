// Package routes holds gobridge's configuration (the "blueprint"): its YAML
// schema, the strict loader, the validator behind `gobridge check`, and topic
// matching for routes.
//
// The types here are used as they are by the bridge: there is no second
// model of the configuration.
package routes

import "time"

// Delivery modes.
const (
	DirectHold     = "direct_hold"
	SharedOutbox   = "shared_outbox"
	DirectOrOutbox = "direct_or_outbox"
)

// Acknowledgement boundaries.
const (
	AckTargetAccept  = "target_accept"
	AckOutboxPersist = "outbox_persist"
)

// Settlement policies for expired records and permanent failures.
const (
	PolicyDLQ  = "dlq"
	PolicyDrop = "drop"
)

// Drain strategies.
const (
	DrainFixedPoll       = "fixed_poll"
	DrainAdaptiveBackoff = "adaptive_backoff"
)

// Config is a whole blueprint.
type Config struct {
	// Version must be 1.
	Version   int              `yaml:"version" zero:""`
	Bridge    Bridge           `yaml:"bridge,omitempty"`
	Stores    Stores           `yaml:"stores,omitempty"`
	Receivers []ReceiverConfig `yaml:"receivers,omitempty" validate:"required,dive"`
	Senders   []SenderConfig   `yaml:"senders,omitempty" validate:"required,dive"`
	Routes    []RouteConfig    `yaml:"routes,omitempty" validate:"required,dive"`

	src source // where the config came from, for positions; zero if built in code
}

// Bridge holds instance-wide settings.
type Bridge struct {
	// ID names this instance in logs, metrics and leases. Required.
	ID    string `yaml:"id,omitempty" validate:"required"`
	Admin Admin  `yaml:"admin,omitempty"`
	// ShutdownTimeout bounds a graceful shutdown: in-flight sends get this
	// long to finish, then are cancelled. Defaults to 30s; must be > 0.
	ShutdownTimeout Duration `yaml:"shutdown_timeout,omitempty" zero:"in-flight sends would get no time at all to finish at shutdown"`
	// LeaseTTL is how long this instance's leases (instance, drainer
	// members and partitions, MQTT sessions) last without renewal; they are
	// renewed every third of it. Defaults to 15s; at least 1s.
	LeaseTTL Duration `yaml:"lease_ttl,omitempty" zero:"every lease would lapse as soon as it was taken"`
	Log      Log      `yaml:"log,omitempty"`
}

// Admin configures the admin HTTP server.
type Admin struct {
	// Listen is the address of /healthz, /readyz, /metrics, /console and
	// /api. Defaults to 127.0.0.1:9090 (after loading it is never nil); ""
	// disables the server.
	Listen *string `yaml:"listen,omitempty"`
	// Token, when set, is the bearer token every /api/ call needs. A token
	// that resolves to "" (an unset ${VAR:-}) means no token: a warning on
	// a loopback listen, an error elsewhere. A listen that is not loopback
	// needs a token.
	Token Secret `yaml:"token,omitempty"`
	// TokenFile reads Token from a file (trailing newline trimmed); never
	// together with Token. After loading it is empty: Token holds the
	// file's content.
	TokenFile string `yaml:"token_file,omitempty"`
	// AllowedHosts are host names (ports ignored) clients may use in the
	// Host header to reach /api and /console, besides the listen host,
	// loopback names and IP literals. Others get 421 (DNS rebinding).
	AllowedHosts []string `yaml:"allowed_hosts,omitempty"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error. Defaults to info.
	Level string `yaml:"level,omitempty" validate:"oneof=debug info warn error"`
	// Format is json or text. Defaults to json.
	Format string `yaml:"format,omitempty" validate:"oneof=json text"`
}

// Stores configures the outbox store. Its leases (one drainer per session
// partition) live in the same store, so that claims are fenced by them in
// the same transaction.
type Stores struct {
	// Outbox is required when any route uses shared_outbox; nil otherwise.
	Outbox *StoreConfig `yaml:"outbox,omitempty"`
}

// StoreConfig selects a store backend.
type StoreConfig struct {
	// Type is memory, sqlite or dynamodb.
	Type    string       `yaml:"type,omitempty" validate:"required,oneof=memory sqlite dynamodb"`
	Options StoreOptions `yaml:"options,omitempty"`
}

// StoreOptions holds the options of every store backend; each backend reads
// its own.
type StoreOptions struct {
	// Path is the SQLite database file. Defaults to ./data/outbox.db.
	Path string `yaml:"path,omitempty"`
	// Sync is full (survives power loss) or normal (survives a process
	// crash). SQLite only. Defaults to full.
	Sync string `yaml:"sync,omitempty" validate:"omitempty,oneof=full normal"`
	// DoneRetention is how many delivered records a SQLite outbox keeps as
	// tombstones (without payload) so that a redelivered message with the
	// same envelope ID (idempotency_key) is not delivered twice. Defaults to
	// 100000; 0 keeps none (such a redelivery is delivered again). Not
	// omitted when 0, so that a marshalled config keeps a written 0.
	DoneRetention int `yaml:"done_retention" validate:"min=0" zero:""`
	// Table is the DynamoDB table name. Defaults to gobridge_outbox.
	Table string `yaml:"table,omitempty"`
	// Region is the AWS region (DynamoDB); empty uses the default chain.
	Region string `yaml:"region,omitempty"`
	// Endpoint overrides the DynamoDB endpoint, for emulators only.
	Endpoint string `yaml:"endpoint,omitempty"`
}

// Receiver types.
const (
	ReceiverMQTT         = "mqtt"
	ReceiverMQTTListener = "mqtt_listener"
	ReceiverHTTPListener = "http_listener"
)

// RouteConfig connects a receiver's messages to a sender.
type RouteConfig struct {
	ID string `yaml:"id,omitempty" validate:"required"`
	// Receiver names the receiver whose messages this route takes.
	Receiver string `yaml:"receiver,omitempty" validate:"required"`
	// Topic is an MQTT topic filter, covered by one of the receiver's
	// subscriptions.
	Topic      string            `yaml:"topic,omitempty" validate:"required"`
	Processors []ProcessorConfig `yaml:"processors,omitempty" validate:"dive"`
	// Sender names the target.
	Sender string `yaml:"sender,omitempty" validate:"required"`
	// DeliveryMode is direct_hold (default), shared_outbox or
	// direct_or_outbox (a direct send first; the outbox only when it fails).
	DeliveryMode string `yaml:"delivery_mode,omitempty" validate:"oneof=direct_hold shared_outbox direct_or_outbox"`
	// AckAfter defaults to target_accept for direct_hold and to
	// outbox_persist for shared_outbox; no other combination is valid, and
	// direct_or_outbox takes none (it acknowledges after either).
	AckAfter string `yaml:"ack_after,omitempty" validate:"omitempty,oneof=target_accept outbox_persist"`
	// PreviousIDs are ids this route had before (a rename): the records the
	// outbox holds under them, in the route's session, are delivered by
	// this route. run refuses to start while the outbox holds records of a
	// route that neither has nor had.
	PreviousIDs []string `yaml:"previous_ids,omitempty"`
	// OrderingKey (a template) gives per-key FIFO delivery; empty: none.
	OrderingKey string  `yaml:"ordering_key,omitempty" template:"true"`
	Session     Session `yaml:"session,omitempty"`
	Policy      Policy  `yaml:"policy,omitempty"`
}

// ProcessorConfig is one step of a route's processor chain.
type ProcessorConfig struct {
	// Type is filter, transform, set_headers, idempotency_key or coalesce.
	Type string `yaml:"type,omitempty" validate:"required,oneof=filter transform set_headers idempotency_key coalesce"`
	// Expr (filter, transform) is an expr-lang expression.
	Expr string `yaml:"expr,omitempty"`
	// Headers (set_headers) maps header names to templates.
	Headers map[string]string `yaml:"headers,omitempty" template:"true"`
	// From (idempotency_key) is a template for the envelope ID.
	From string `yaml:"from,omitempty" template:"true"`
	// Hash (idempotency_key) uses SHA-256 of topic and payload as the ID.
	Hash bool `yaml:"hash,omitempty"`
	// Key (coalesce) is a template; newer messages replace older pending
	// ones with the same key.
	Key string `yaml:"key,omitempty" template:"true"`
}

// UsesOutbox reports whether the route keeps records in an outbox session
// (shared_outbox, direct_or_outbox).
func (r *RouteConfig) UsesOutbox() bool {
	return r.DeliveryMode == SharedOutbox || r.DeliveryMode == DirectOrOutbox
}

// Session is the outbox partition group a shared_outbox route persists into.
type Session struct {
	// ID is required for shared_outbox; routes may share a session.
	ID string `yaml:"id,omitempty"`
	// Partitions is the number of drainer partitions, 1..1024; records
	// spread by FNV-1a of the ordering key (or coalesce key, or envelope
	// ID). Defaults to 1.
	Partitions int `yaml:"partitions,omitempty" validate:"min=1,max=1024" zero:"a session needs at least one partition"`
	// DrainInterval is shorthand for fixed_poll at that interval (> 0);
	// never together with DrainStrategy. After loading it is folded into
	// DrainStrategy and reads 0: the bridge reads DrainStrategy only.
	DrainInterval Duration `yaml:"drain_interval,omitempty" zero:"the drainer would poll the store in a busy loop"`
	// DrainStrategy defaults to fixed_poll every 1s. After loading it is
	// never nil.
	DrainStrategy *DrainStrategy `yaml:"drain_strategy,omitempty"`
	// BatchSize is the most records per claim, 1..10000. Defaults to 100.
	BatchSize int `yaml:"batch_size,omitempty" validate:"min=1,max=10000" zero:"a claim of 0 records would never deliver anything"`
}

// DrainStrategy says how often an idle drainer polls.
type DrainStrategy struct {
	// Type is fixed_poll or adaptive_backoff.
	Type string `yaml:"type,omitempty" validate:"required,oneof=fixed_poll adaptive_backoff"`
	// Interval (fixed_poll) is the wait between claims that found nothing.
	// Defaults to 1s; must be > 0.
	Interval Duration `yaml:"interval,omitempty" zero:"the drainer would poll the store in a busy loop"`
	// MinInterval (adaptive_backoff) is the wait after a claim that found
	// records. Defaults to 100ms; must be > 0 and <= MaxInterval.
	MinInterval Duration `yaml:"min_interval,omitempty" zero:"the drainer would poll the store in a busy loop"`
	// MaxInterval (adaptive_backoff) caps the wait while idle. Defaults to
	// 30s; must be > 0.
	MaxInterval Duration `yaml:"max_interval,omitempty" zero:"the drainer would poll the store in a busy loop"`
	// Multiplier (adaptive_backoff) grows the wait after each claim that
	// found nothing. Defaults to 2.0; must be > 1.
	Multiplier float64 `yaml:"multiplier,omitempty" zero:"the idle interval must grow: multiplier must be greater than 1"`
}

// Policy holds a route's delivery policy.
type Policy struct {
	// MaxInFlight bounds concurrent sends (direct_hold) and is the AIMD
	// ceiling (shared_outbox). Defaults to 100; must be >= 1.
	MaxInFlight int `yaml:"max_in_flight,omitempty" validate:"min=1" zero:"no send could ever start"`
	// MaxOutboxDepth is the live records per session at which ingest stops
	// acknowledging, so the broker's flow control pushes back. Defaults to
	// 10000000; must be >= 1.
	MaxOutboxDepth int `yaml:"max_outbox_depth,omitempty" validate:"min=1" zero:"ingest would never acknowledge a message"`
	// MaxOutboxBytes is the bytes of live records (payload, topic and
	// headers) per session at which ingest stops acknowledging; whichever
	// of the two limits is reached first holds. Defaults to 1073741824
	// (1 GiB); must be >= 1.
	MaxOutboxBytes int64 `yaml:"max_outbox_bytes,omitempty" validate:"min=1" zero:"ingest would never acknowledge a message"`
	// MaxDeadLetters is the dead letters a route keeps before records that
	// would die are retried at backoff.max_interval instead and ingest dead
	// letters push back. Defaults to 100000; must be >= 1.
	MaxDeadLetters int `yaml:"max_dead_letters,omitempty" validate:"min=1" zero:"no record could ever be dead-lettered: every failure would be held"`
	// StallAfter makes /readyz fail when a session's oldest live record is
	// older and nothing was sent in that window, or a direct_hold route has
	// held its source longer. Defaults to 10m; must be > 0.
	StallAfter Duration `yaml:"stall_after,omitempty" zero:"/readyz would report a stall whenever anything is pending"`
	// MaxReplayAttempts: a transiently failing record is poisoned only when
	// it has been sent more than this many times and ReplayBudget has
	// passed since its first attempt. Defaults to 5; 0 leaves the decision
	// to ReplayBudget alone. Not omitted when 0 (a written 0 must survive a
	// marshal).
	MaxReplayAttempts int `yaml:"max_replay_attempts" validate:"min=0" zero:""`
	// ReplayBudget is the wall-clock time since a record's first attempt
	// that must pass before it is poisoned (see MaxReplayAttempts).
	// Defaults to 15m; 0 leaves the decision to MaxReplayAttempts alone.
	ReplayBudget Duration `yaml:"replay_budget" zero:""`
	// DirectTimeout bounds the direct attempt of a direct_or_outbox route
	// before the message falls back to the outbox. Defaults to 2s; must be
	// > 0.
	DirectTimeout Duration `yaml:"direct_timeout,omitempty" zero:"every direct attempt would time out before it started"`
	// SendTimeout bounds one send. Defaults to 30s; must be > 0.
	SendTimeout Duration `yaml:"send_timeout,omitempty" zero:"every send would time out before it started"`
	// TTL: records older than this (since they were received) are settled
	// by OnExpired before any send. Defaults to 0: records never expire.
	TTL Duration `yaml:"ttl,omitempty" zero:""`
	// OnExpired is dlq or drop. Defaults to dlq with an outbox store, drop
	// without one (there is nowhere to keep dead letters).
	OnExpired string `yaml:"on_expired,omitempty" validate:"oneof=dlq drop"`
	// OnPermanentFailure is dlq or drop. Defaults to dlq with an outbox
	// store, drop without one.
	OnPermanentFailure string  `yaml:"on_permanent_failure,omitempty" validate:"oneof=dlq drop"`
	Backoff            Backoff `yaml:"backoff,omitempty"`
}

// Backoff is exponential backoff with full jitter.
type Backoff struct {
	// InitialInterval is the ceiling of the first retry delay. Defaults to
	// 1s; must be > 0 and <= MaxInterval.
	InitialInterval Duration `yaml:"initial_interval,omitempty" zero:"retries would follow each other without any delay"`
	// MaxInterval caps the retry delay. Defaults to 30s; must be > 0.
	MaxInterval Duration `yaml:"max_interval,omitempty" zero:"retries would follow each other without any delay"`
	// Multiplier grows the delay ceiling after each attempt. Defaults to
	// 2.0; must be >= 1 (1 keeps it constant).
	Multiplier float64 `yaml:"multiplier,omitempty" validate:"min=1" zero:"the delay would shrink to nothing: multiplier must be at least 1 (1 keeps it constant)"`
}

// Duration is a time.Duration written in YAML as a string with a unit
// ("1s", "15m"); a bare number is an error.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Secret is a string that never prints: logs and errors show REDACTED.
type Secret string

// String returns REDACTED for a non-empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "REDACTED"
}
