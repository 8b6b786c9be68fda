package mqtt

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/net/proxy"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/topics"
)

// Defaults New applies to zero Options fields, and fixed limits.
const (
	DefaultKeepAlive      = 30 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	// MaxInFlight is the hard cap on messages received and not yet
	// acknowledged, whatever the broker's own in-flight window is. When it
	// or MaxInflightBytes is reached the receiver stops reading QoS 1/2
	// messages (the broker's flow control holds them) and drops QoS 0
	// messages, counted.
	MaxInFlight = 2048
	// MaxReconnectInterval caps paho's exponential reconnect backoff, which
	// starts at 1s.
	MaxReconnectInterval = 30 * time.Second
)

// ErrConfig is wrapped by every configuration error New returns.
var ErrConfig = errors.New("mqtt receiver: invalid configuration")

// Options configure a Receiver. Zero fields take the defaults named.
type Options struct {
	// ID names the receiver in messages and logs. Required.
	ID string
	// BrokerURLs are tried in order: tcp://, mqtt://, ssl://, tls://,
	// mqtts://, ws:// or wss://. At least one.
	BrokerURLs []string
	// ClientID is the MQTT client id. Required.
	ClientID string
	// CleanSession false keeps a persistent session: the broker holds QoS
	// 1/2 messages while the receiver is away.
	CleanSession bool
	// Username and Password authenticate to the broker; empty: none.
	Username, Password string
	// KeepAlive defaults to DefaultKeepAlive.
	KeepAlive time.Duration
	// ConnectTimeout bounds one connection attempt; defaults to
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// TLS is used for ssl://, tls://, mqtts:// and wss:// brokers; nil uses
	// Go's defaults (the system roots).
	TLS *tls.Config
	// Topics are the subscriptions, made again on every connection. At
	// least one.
	Topics []Subscription
	// MaxPayloadBytes: a larger payload reaches the sink truncated
	// (receivers.Message.Truncated) and is then acknowledged. Defaults to
	// receivers.DefaultMaxPayloadBytes.
	MaxPayloadBytes int
	// MaxInflightBytes bounds the payload and topic bytes received and not yet
	// acknowledged (see MaxInFlight); defaults to
	// receivers.DefaultMaxInflightBytes.
	MaxInflightBytes int
	// Window, when set, is shared with other receivers that stand for the
	// same configured receiver (sessions adopted from other instances): its
	// counters and MaxInflightBytes cover them all. Nil: a window of its own.
	Window *receivers.Window
	// Adopt takes over the persistent session another instance left
	// (DESIGN.md §11.7): the receiver makes no subscription (the session
	// holds them) and does not reconnect. Run returns ErrNoSession when the
	// broker has no session for ClientID, and ErrConnectionLost when the
	// connection drops (another client may have taken the session over).
	// Needs CleanSession false.
	Adopt bool
	// MayConnect, when set, is asked before every connection attempt, the
	// first and each reconnection; an error fails the attempt, which is
	// retried as a failed connection is. A leased session connects only
	// while its lease holds.
	MayConnect func() error
}

// Subscription is one topic filter with its requested QoS.
type Subscription struct {
	Filter string
	QoS    byte
}

// validate checks o and returns it with its defaults applied, and the
// broker URLs redacted for logs.
func (o Options) validate() (Options, []string, error) {
	if o.ID == "" || o.ClientID == "" {
		return o, nil, fmt.Errorf("%w: ID and ClientID are required", ErrConfig)
	}
	if len(o.BrokerURLs) == 0 {
		return o, nil, fmt.Errorf("%w: no broker URL", ErrConfig)
	}
	redacted := make([]string, len(o.BrokerURLs))
	for i, raw := range o.BrokerURLs {
		u, err := url.Parse(raw)
		if err != nil {
			return o, nil, fmt.Errorf("%w: broker URL %d does not parse", ErrConfig, i) // its text may hold a password
		}
		redacted[i] = u.Redacted()
		switch u.Scheme {
		case "tcp", "ssl", "tls", "mqtt", "mqtts", "ws", "wss":
		default:
			return o, nil, fmt.Errorf("%w: broker URL %s: scheme must be tcp, ssl, ws or wss", ErrConfig, redacted[i])
		}
	}
	if o.Adopt && o.CleanSession {
		return o, nil, fmt.Errorf("%w: Adopt needs a persistent session (CleanSession false)", ErrConfig)
	}
	if len(o.Topics) == 0 {
		return o, nil, fmt.Errorf("%w: no topics", ErrConfig)
	}
	for _, s := range o.Topics {
		if err := topics.ValidateFilter(s.Filter); err != nil || s.QoS > 2 {
			return o, nil, fmt.Errorf("%w: subscription %q with QoS %d: %v", ErrConfig, s.Filter, s.QoS, err)
		}
	}
	o.KeepAlive = cmp.Or(o.KeepAlive, DefaultKeepAlive)
	o.ConnectTimeout = cmp.Or(o.ConnectTimeout, DefaultConnectTimeout)
	o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, receivers.DefaultMaxPayloadBytes)
	o.MaxInflightBytes = cmp.Or(o.MaxInflightBytes, receivers.DefaultMaxInflightBytes)
	return o, redacted, nil
}

// clientOptions translates o into paho options; the caller sets the
// handlers.
func (o Options) clientOptions() *paho.ClientOptions {
	opts := paho.NewClientOptions()
	for _, u := range o.BrokerURLs {
		opts.AddBroker(u)
	}
	if o.TLS != nil {
		opts.SetTLSConfig(o.TLS)
	}
	opts.SetClientID(o.ClientID)
	opts.SetCleanSession(o.CleanSession)
	opts.SetUsername(o.Username)
	opts.SetPassword(o.Password)
	opts.SetKeepAlive(o.KeepAlive)
	opts.SetConnectTimeout(o.ConnectTimeout)
	opts.SetAutoReconnect(!o.Adopt)
	opts.SetConnectRetry(true)
	opts.SetConnectRetryInterval(time.Second)
	opts.SetMaxReconnectInterval(MaxReconnectInterval)
	// Subscriptions are made in the OnConnect handler on every connection;
	// ResumeSubs only replays SUBSCRIBE packets that were never acknowledged.
	opts.SetResumeSubs(false)
	// Arrival order is what we acknowledge in: handlers run one at a time in
	// paho's router goroutine, so they must not block for long.
	opts.SetOrderMatters(true)
	opts.SetAutoAckDisabled(true)
	if o.MayConnect != nil {
		opts.SetCustomOpenConnectionFn(func(u *url.URL, co paho.ClientOptions) (net.Conn, error) {
			if err := o.MayConnect(); err != nil {
				return nil, err
			}
			return dial(u, co)
		})
	}
	return opts
}

// dial opens a connection to broker u as paho's own dialer does: ws and
// wss, TLS, or TCP (through a proxy from the environment; TLS too when
// all_proxy is set).
func dial(u *url.URL, co paho.ClientOptions) (net.Conn, error) {
	d := cmp.Or(co.Dialer, &net.Dialer{Timeout: co.ConnectTimeout})
	switch u.Scheme {
	case "ws", "wss":
		ws := *u
		ws.User = nil // the WebSocket library refuses user info
		var tc *tls.Config
		if u.Scheme == "wss" {
			tc = co.TLSConfig
		}
		return paho.NewWebsocket(ws.String(), tc, co.ConnectTimeout, co.HTTPHeaders, co.WebsocketOptions)
	case "ssl", "tls", "mqtts":
		if os.Getenv("all_proxy") == "" { // paho's rule: only all_proxy sends TLS through a proxy
			return tls.DialWithDialer(d, "tcp", u.Host, co.TLSConfig)
		}
		return dialTLSViaProxy(proxy.FromEnvironmentUsing(d), u, co)
	}
	return proxy.FromEnvironmentUsing(d).Dial("tcp", u.Host)
}

// dialTLSViaProxy opens a TLS connection to broker u through p, checking
// the broker's certificate against its host name as a direct dial does.
func dialTLSViaProxy(p proxy.Dialer, u *url.URL, co paho.ClientOptions) (net.Conn, error) {
	conn, err := p.Dial("tcp", u.Host)
	if err != nil {
		return nil, err
	}
	tc := co.TLSConfig.Clone()
	if tc == nil {
		tc = &tls.Config{}
	}
	tc.ServerName = cmp.Or(tc.ServerName, u.Hostname())
	ctx, cancel := context.WithTimeout(context.Background(), co.ConnectTimeout)
	defer cancel()
	c := tls.Client(conn, tc)
	if err := c.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}
