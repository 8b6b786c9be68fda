package bridge

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/httplistener"
	"github.com/gobridge/gobridge/receivers/listener"
	"github.com/gobridge/gobridge/receivers/mqtt"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders/http"
	"github.com/gobridge/gobridge/senders/sqs"
	"github.com/gobridge/gobridge/senders/stdout"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// SQLiteOptions maps a SQLite store's config to its options, for the
// bridge and the CLI: a done_retention of 0 keeps no tombstones.
func SQLiteOptions(c routes.StoreConfig) sqlite.Options {
	return sqlite.Options{Sync: c.Options.Sync, DoneRetention: cmp.Or(c.Options.DoneRetention, -1)}
}

// openStoreBackend opens the outbox store c names. DynamoDB tables are
// created when missing only against an emulator (an endpoint is set); in
// AWS they are created by infrastructure code (README "dynamodb").
func openStoreBackend(c routes.StoreConfig) (stores.Store, error) {
	switch c.Type {
	case "memory":
		return memory.New(memory.Options{}), nil
	case "sqlite":
		return sqlite.Open(c.Options.Path, SQLiteOptions(c))
	case "dynamodb":
		return dynamodb.Open(context.Background(), dynamodb.Options{
			Table: c.Options.Table, Region: c.Options.Region,
			Endpoint: c.Options.Endpoint, CreateTables: c.Options.Endpoint != "",
		})
	}
	return nil, fmt.Errorf("outbox store type %q is not available in this build", c.Type)
}

// newSenderBackend builds the sender c names; stdout senders write to out.
func newSenderBackend(c routes.SenderConfig, maxInFlight int, out io.Writer, log *slog.Logger) (drainer.Sender, error) {
	switch c.Type {
	case routes.SenderStdout:
		return stdout.New(out), nil
	case routes.SenderHTTP:
		return http.New(c, maxInFlight, log)
	case routes.SenderSQS:
		return sqs.New(context.Background(), c, log)
	}
	return nil, fmt.Errorf("unknown sender type %q", c.Type)
}

// CheckSender builds the sender c names as New does, and closes it: the
// constructors read TLS files and the AWS configuration but connect to
// nothing, so `gobridge check` reports what they refuse.
func CheckSender(c routes.SenderConfig) error {
	s, err := newSenderBackend(c, 0, io.Discard, nil)
	if c, ok := s.(interface{ Close() error }); ok && err == nil {
		_ = c.Close()
	}
	return err
}

// CheckStore makes the client of the outbox store c names, connecting to
// nothing, so that `gobridge check` reports what the AWS configuration
// lacks (a DynamoDB region) in its own environment, as it does for senders.
func CheckStore(c *routes.StoreConfig) error {
	if c == nil || c.Type != "dynamodb" {
		return nil
	}
	_, err := dynamodb.NewClient(context.Background(), dynamodb.Options{Table: c.Options.Table, Region: c.Options.Region, Endpoint: c.Options.Endpoint})
	return err
}

// mqttOptions maps an mqtt receiver's config to its Options.
func mqttOptions(c routes.ReceiverConfig, tc *tls.Config) mqtt.Options {
	o := c.Options
	subs := make([]mqtt.Subscription, len(c.Topics))
	for i, t := range c.Topics {
		qos := routes.DefaultQoS
		if t.QoS != nil {
			qos = *t.QoS
		}
		subs[i] = mqtt.Subscription{Filter: t.Topic, QoS: byte(qos)}
	}
	return mqtt.Options{
		ID: c.ID, BrokerURLs: o.BrokerURLs, ClientID: o.ClientID, CleanSession: o.CleanSession,
		Username: o.Username, Password: o.Password.Reveal(), KeepAlive: o.KeepAlive.D(),
		ConnectTimeout: o.ConnectTimeout.D(), TLS: tc, Topics: subs,
		MaxPayloadBytes: o.MaxPayloadBytes, MaxInflightBytes: o.MaxInflightBytes,
	}
}

// newReceiverBackend maps a receiver's config to its component's Options.
func newReceiverBackend(c routes.ReceiverConfig, sink receivers.Sink, log *slog.Logger) (receiver, error) {
	o := c.Options
	tc, err := o.TLS.Config(c.Type != routes.ReceiverMQTT)
	if err != nil {
		return nil, err
	}
	switch c.Type {
	case routes.ReceiverMQTT:
		return mqtt.New(mqttOptions(c, tc), sink, log)
	case routes.ReceiverMQTTListener:
		return listener.New(listenerOptions(c, tc), sink, log)
	case routes.ReceiverHTTPListener:
		return httplistener.New(httplistener.Options{
			ID: c.ID, Listen: o.Listen, Topics: topicFilters(c), Token: o.Token.Reveal(), AllowAnonymous: o.AllowAnonymous, TLS: tc,
			MaxPayloadBytes: o.MaxPayloadBytes, MaxInflightBytes: o.MaxInflightBytes, MaxInFlight: o.MaxInFlight,
			SettleTimeout: o.SettleTimeout.D(), ReadHeaderTimeout: o.ConnectTimeout.D(), ReadTimeout: o.ReadTimeout.D(),
			WriteTimeout: o.WriteTimeout.D(), Headers: o.Headers, MaxBatchLines: o.MaxBatchLines, MaxBatchBytes: o.MaxBatchBytes,
		}, sink, log)
	}
	return nil, fmt.Errorf("unknown receiver type %q", c.Type)
}

// listenerOptions maps an mqtt_listener's config to its Options.
func listenerOptions(c routes.ReceiverConfig, tc *tls.Config) listener.Options {
	o := c.Options
	users := make([]listener.User, len(o.Users))
	for i, u := range o.Users {
		users[i] = listener.User{Username: u.Username, Password: u.Password.Reveal(), PasswordHash: u.PasswordHash.Reveal(),
			ACL: listener.ACL{Publish: u.Publish, Subscribe: u.Subscribe}}
	}
	return listener.Options{
		ID: c.ID, Listen: o.Listen, Topics: topicFilters(c), TLS: tc, Users: users,
		AllowAnonymous: o.AllowAnonymous, Anonymous: listener.ACL{Publish: o.Anonymous.Publish, Subscribe: o.Anonymous.Subscribe},
		MaxPayloadBytes: o.MaxPayloadBytes, MaxInflightBytes: o.MaxInflightBytes, MaxClients: o.MaxClients,
		ConnectTimeout: o.ConnectTimeout.D(), Retain: o.Retain, SessionExpiry: o.SessionExpiry.D(),
	}
}

// topicFilters lists the topic filters of a listener's topics.
func topicFilters(c routes.ReceiverConfig) []string {
	filters := make([]string, len(c.Topics))
	for i, t := range c.Topics {
		filters[i] = t.Topic
	}
	return filters
}
