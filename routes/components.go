package routes

// ReceiverConfig is one message source.
type ReceiverConfig struct {
	ID string `yaml:"id,omitempty" validate:"required"`
	// Type is mqtt (a client of an existing broker), mqtt_listener (an
	// embedded broker) or http_listener (HTTP ingest).
	Type    string          `yaml:"type,omitempty" validate:"required,oneof=mqtt mqtt_listener http_listener"`
	Options ReceiverOptions `yaml:"options,omitempty"`
	// Topics are the subscriptions (http_listener: the topics producers
	// may publish to); a route's topic must be covered by one.
	Topics []Subscription `yaml:"topics,omitempty" validate:"required,dive"`
}

// ReceiverOptions holds the options of every receiver type.
type ReceiverOptions struct {
	// BrokerURLs (mqtt) are tcp://, ssl://, ws:// or wss:// URLs. Required.
	BrokerURLs []string `yaml:"broker_urls,omitempty"`
	// ClientID (mqtt) defaults to "gobridge-" + bridge.id.
	ClientID string `yaml:"client_id,omitempty"`
	// CleanSession (mqtt) defaults to false: a persistent session, so the
	// broker keeps QoS 1/2 messages while gobridge is away.
	CleanSession bool   `yaml:"clean_session,omitempty"`
	Username     string `yaml:"username,omitempty"`
	Password     Secret `yaml:"password,omitempty"`
	// PasswordFile (mqtt) reads Password from a file; never with Password.
	// After loading it is empty: Password holds the file's content.
	PasswordFile string `yaml:"password_file,omitempty"`
	// KeepAlive (mqtt) is the MQTT keep-alive interval; the broker drops a
	// connection silent for 1.5 times it. Defaults to 30s; must be > 0 (0
	// would turn keep-alive off).
	KeepAlive Duration `yaml:"keep_alive,omitempty" zero:"it turns MQTT keep-alive off, so a dead connection to the broker would go unnoticed"`
	// ConnectTimeout bounds one connection attempt (mqtt), or how long a
	// client may take to send its CONNECT (mqtt_listener) or its request
	// headers (http_listener). Defaults to 10s; must be > 0.
	ConnectTimeout Duration `yaml:"connect_timeout,omitempty" zero:"a connection attempt to an unresponsive broker would never time out"`
	// MaxPayloadBytes: a larger payload becomes an ingest dead letter
	// (payload_too_large) holding its first 1 KiB. 1..268435456; defaults
	// to 262144.
	MaxPayloadBytes int `yaml:"max_payload_bytes,omitempty" validate:"min=1,max=268435456" zero:"every payload would be a dead letter"`
	// MaxInflightBytes bounds the payload bytes received and not yet
	// acknowledged (mqtt_listener: across all publishers). Defaults to
	// 67108864 (64 MiB).
	MaxInflightBytes int `yaml:"max_inflight_bytes,omitempty" validate:"min=1" zero:"gobridge could never read a message"`
	// Listen (mqtt_listener, http_listener) is the TCP address to accept
	// publishers on. Defaults to 127.0.0.1:1883 (mqtt_listener) or
	// 127.0.0.1:8080 (http_listener).
	Listen string `yaml:"listen,omitempty"`
	// Users (mqtt_listener) may connect.
	Users []User `yaml:"users,omitempty" validate:"dive"`
	// AllowAnonymous (mqtt_listener) lets clients without a username
	// connect. Without it they may only on a loopback listen with no users
	// (a warning). http_listener: requests need no token; allowed on a
	// loopback listen only.
	AllowAnonymous bool `yaml:"allow_anonymous,omitempty"`
	// Token (http_listener) is the bearer token every request must carry;
	// TokenFile names a file holding it (trailing newline ignored). One of
	// them unless allow_anonymous.
	Token     Secret `yaml:"token,omitempty"`
	TokenFile string `yaml:"token_file,omitempty"`
	// MaxInFlight (http_listener) bounds the requests served at once; one
	// more is answered 503. Defaults to 256.
	MaxInFlight int `yaml:"max_in_flight,omitempty" validate:"omitempty,min=1" zero:"no request could ever be served"`
	// SettleTimeout (http_listener) bounds how long a request waits for
	// its message to be settled (room in the outbox included) before it is
	// answered 503. Defaults to 30s.
	SettleTimeout Duration `yaml:"settle_timeout,omitempty" zero:"every request would be answered 503 before its message settled"`
	// ReadTimeout (http_listener) bounds reading a whole request; defaults
	// to 30s. WriteTimeout bounds a request from the end of its headers to
	// the end of its answer; defaults to 60s and must exceed
	// settle_timeout.
	ReadTimeout  Duration `yaml:"read_timeout,omitempty" zero:"a slow client could hold a request open forever"`
	WriteTimeout Duration `yaml:"write_timeout,omitempty" zero:"a slow client could hold a request open forever"`
	// Headers (http_listener) are request headers carried into the
	// message's headers, besides Content-Type.
	Headers []string `yaml:"headers,omitempty"`
	// MaxBatchLines and MaxBatchBytes (http_listener) bound one NDJSON
	// batch. Default 1000 and 4194304 (4 MiB).
	MaxBatchLines int `yaml:"max_batch_lines,omitempty" validate:"omitempty,min=1" zero:"no batch could be accepted"`
	MaxBatchBytes int `yaml:"max_batch_bytes,omitempty" validate:"omitempty,min=1" zero:"no batch could be accepted"`
	// Anonymous (mqtt_listener) is the ACL of anonymous clients.
	Anonymous ACL `yaml:"anonymous,omitempty"`
	// MaxClients (mqtt_listener) bounds the open connections. Defaults to
	// 1024.
	MaxClients int `yaml:"max_clients,omitempty" validate:"omitempty,min=1" zero:"no client could ever connect"`
	// Retain (mqtt_listener) keeps retained messages; false (the default)
	// strips the retain flag.
	Retain bool `yaml:"retain,omitempty"`
	// SessionExpiry (mqtt_listener) caps how long a disconnected persistent
	// session is kept. Defaults to 1h; 0 ends a session when its client
	// disconnects.
	SessionExpiry Duration `yaml:"session_expiry,omitempty" zero:""`
	TLS           TLS      `yaml:"tls,omitempty"`
}

// User is one account of the embedded listener.
type User struct {
	Username string `yaml:"username,omitempty" validate:"required"`
	// Password, PasswordFile (a file holding the password; after loading
	// it is empty and Password holds the file's content) or PasswordHash
	// (bcrypt): one of them, or none for a user that connects only with a
	// client certificate of its name (tls.client_ca_file).
	Password     Secret `yaml:"password,omitempty"`
	PasswordFile string `yaml:"password_file,omitempty"`
	PasswordHash Secret `yaml:"password_hash,omitempty"`
	// Publish are the topic filters the user may publish to; defaults to
	// the receiver's topics.
	Publish []string `yaml:"publish,omitempty"`
	// Subscribe are the topic filters the user may subscribe to; none by
	// default.
	Subscribe []string `yaml:"subscribe,omitempty"`
}

// ACL lists the topic filters clients may publish and subscribe to.
type ACL struct {
	// Publish defaults to the receiver's topics.
	Publish []string `yaml:"publish,omitempty"`
	// Subscribe defaults to none.
	Subscribe []string `yaml:"subscribe,omitempty"`
}

// TLS holds TLS settings; empty fields mean "not used".
type TLS struct {
	CAFile   string `yaml:"ca_file,omitempty"`
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	// ClientCAFile (mqtt_listener) requires client certificates signed by
	// these CAs.
	ClientCAFile       string `yaml:"client_ca_file,omitempty"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify,omitempty"`
}

// Subscription is one topic filter a receiver subscribes to.
type Subscription struct {
	// Topic is an MQTT topic filter, optionally $share/GROUP/filter.
	Topic string `yaml:"topic,omitempty" validate:"required"`
	// QoS is 0, 1 or 2. Defaults to 1; after loading it is never nil. 0 is
	// at most once (a warning when it feeds a route).
	QoS *int `yaml:"qos,omitempty" validate:"omitnil,min=0,max=2" zero:""`
}

// Sender types.
const (
	SenderSQS    = "sqs"
	SenderHTTP   = "http"
	SenderStdout = "stdout"
)

// SenderConfig is one delivery target.
type SenderConfig struct {
	ID string `yaml:"id,omitempty" validate:"required"`
	// Type is sqs, http or stdout.
	Type    string        `yaml:"type,omitempty" validate:"required,oneof=sqs http stdout"`
	Options SenderOptions `yaml:"options,omitempty"`
}

// SenderOptions holds the options of every sender type. String options may
// hold per-message placeholders: {topic}, {topic.N}, {header.NAME}, {id},
// {payload.PATH}.
type SenderOptions struct {
	// QueueURL (sqs) is required; a URL ending in .fifo is a FIFO queue.
	QueueURL string `yaml:"queue_url,omitempty"`
	// Region (sqs) empty uses the default chain.
	Region string `yaml:"region,omitempty"`
	// Endpoint (sqs) overrides the endpoint, for SQS-compatible servers.
	Endpoint string `yaml:"endpoint,omitempty"`
	// MessageGroupID (sqs) is required for FIFO queues, rejected otherwise.
	MessageGroupID string `yaml:"message_group_id,omitempty" template:"true"`
	// Attributes (sqs) become message attributes (templates allowed).
	Attributes map[string]string `yaml:"attributes,omitempty" template:"true"`
	// BatchSize (sqs) is the messages per SendMessageBatch, 1..10. Defaults
	// to 10.
	BatchSize int `yaml:"batch_size,omitempty" validate:"omitempty,min=1,max=10" zero:"SendMessageBatch takes 1 to 10 messages"`

	// URL (http) is required (templates allowed).
	URL string `yaml:"url,omitempty" template:"true"`
	// Method (http) defaults to POST.
	Method string `yaml:"method,omitempty" validate:"omitempty,oneof=GET POST PUT PATCH DELETE"`
	// Headers (http) are request headers (templates allowed; not Host).
	Headers map[string]string `yaml:"headers,omitempty" template:"true"`
	// HeadersFile (http) maps header names to files holding their values
	// (a secret such as "Bearer ..."; trailing newline trimmed; literal
	// text, not a template). A header is in Headers or HeadersFile, never
	// both. After loading it is empty: Headers holds the values.
	HeadersFile map[string]string `yaml:"headers_file,omitempty"`
	// Timeout (http) bounds one request, connecting included. Defaults to
	// 5s; must be > 0.
	Timeout Duration `yaml:"timeout,omitempty" zero:"a request to a target that never answers would never time out"`
	TLS     TLS      `yaml:"tls,omitempty"`
}
