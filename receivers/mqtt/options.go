package mqtt

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/routes"
)

// Defaults applied by New when the configuration leaves a field empty.
const (
	DefaultKeepAlive      = 30 * time.Second
	DefaultConnectTimeout = 10 * time.Second
	DefaultQoS            = 1
	// MaxReconnectInterval caps paho's exponential reconnect backoff, which
	// starts at 1s.
	MaxReconnectInterval = 30 * time.Second
)

// ErrConfig is wrapped by every configuration error New returns.
var ErrConfig = errors.New("mqtt receiver: invalid configuration")

// subscription is one topic filter with its requested QoS.
type subscription struct {
	filter string
	qos    byte
}

func subscriptions(cfg routes.ReceiverConfig) ([]subscription, error) {
	if len(cfg.Topics) == 0 {
		return nil, fmt.Errorf("%w: receiver %q has no topics", ErrConfig, cfg.ID)
	}
	subs := make([]subscription, 0, len(cfg.Topics))
	for i, t := range cfg.Topics {
		qos := DefaultQoS
		if t.QoS != nil {
			qos = *t.QoS
		}
		if qos < 0 || qos > 2 {
			return nil, fmt.Errorf("%w: topics[%d].qos %d is not 0, 1 or 2", ErrConfig, i, qos)
		}
		if t.Topic == "" {
			return nil, fmt.Errorf("%w: topics[%d].topic is empty", ErrConfig, i)
		}
		subs = append(subs, subscription{filter: t.Topic, qos: byte(qos)})
	}
	return subs, nil
}

// clientTLS builds the client TLS configuration; nil when no TLS option is
// set (paho then uses Go's defaults for ssl:// and wss:// URLs).
func clientTLS(t routes.TLS) (*tls.Config, error) {
	if t == (routes.TLS{}) {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // operator's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: tls.ca_file %s holds no PEM certificate", ErrConfig, t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: tls.cert_file and tls.key_file go together", ErrConfig)
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load tls client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// clientOptions translates the receiver's configuration into paho options.
// The handlers are set by the caller.
func clientOptions(cfg routes.ReceiverConfig, bridgeID string) (*paho.ClientOptions, error) {
	o := cfg.Options
	if len(o.BrokerURLs) == 0 {
		return nil, fmt.Errorf("%w: options.broker_urls is empty", ErrConfig)
	}
	opts := paho.NewClientOptions()
	for i, raw := range o.BrokerURLs {
		u, err := url.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("%w: options.broker_urls[%d]: %v", ErrConfig, i, err)
		}
		switch u.Scheme {
		case "tcp", "ssl", "tls", "mqtt", "mqtts", "ws", "wss":
		default:
			return nil, fmt.Errorf("%w: options.broker_urls[%d] %q: scheme must be tcp, ssl, ws or wss", ErrConfig, i, raw)
		}
		opts.AddBroker(raw)
	}
	tc, err := clientTLS(o.TLS)
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts.SetTLSConfig(tc)
	}
	opts.SetClientID(cmp.Or(o.ClientID, "gobridge-"+bridgeID))
	opts.SetCleanSession(o.CleanSession)
	if o.Username != "" {
		opts.SetUsername(o.Username)
	}
	if o.Password != "" {
		opts.SetPassword(string(o.Password))
	}
	opts.SetKeepAlive(cmp.Or(o.KeepAlive.D(), DefaultKeepAlive))
	opts.SetConnectTimeout(cmp.Or(o.ConnectTimeout.D(), DefaultConnectTimeout))
	opts.SetAutoReconnect(true)
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
	return opts, nil
}
