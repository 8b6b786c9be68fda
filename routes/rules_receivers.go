package routes

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gobridge/gobridge/topics"
)

var receiverOptions = map[string][]string{
	ReceiverMQTT: {"broker_urls", "client_id", "clean_session", "username", "password", "password_file", "keep_alive", "connect_timeout",
		"max_payload_bytes", "max_inflight_bytes", "tls"},
	ReceiverMQTTListener: {"listen", "users", "allow_anonymous", "anonymous", "max_clients", "connect_timeout",
		"retain", "session_expiry", "max_payload_bytes", "max_inflight_bytes", "tls"},
	ReceiverHTTPListener: {"listen", "token", "token_file", "allow_anonymous", "connect_timeout", "max_payload_bytes",
		"max_inflight_bytes", "max_in_flight", "settle_timeout", "read_timeout", "write_timeout", "headers",
		"max_batch_lines", "max_batch_bytes", "tls"},
}

var senderOptions = map[string][]string{
	SenderSQS:    {"queue_url", "region", "endpoint", "message_group_id", "attributes", "batch_size"},
	SenderHTTP:   {"url", "method", "headers", "headers_file", "timeout", "tls"},
	SenderStdout: nil,
}

func (c *Config) checkReceivers(add func(Problem)) {
	c.checkDuplicateIDs(add, "receivers", ids(c.Receivers, receiverID))

	for i, r := range c.Receivers {
		path := fmt.Sprintf("receivers[%d]", i)
		c.checkOptions(add, path+".options", "receiver", r.Type, r.Options, receiverOptions)
		switch r.Type {
		case ReceiverMQTT:
			if len(r.Options.BrokerURLs) == 0 {
				add(c.Errorf(path+".options.broker_urls", "required", "%s.options.broker_urls is required for an mqtt receiver", path))
			}
			for j, u := range r.Options.BrokerURLs {
				if err := checkBrokerURL(u); err != nil {
					add(c.Errorf(fmt.Sprintf("%s.options.broker_urls[%d]", path, j), "broker-url", "%s.options.broker_urls[%d]: %v", path, j, err))
				}
			}
			plain := func(raw string) bool {
				u, err := url.Parse(raw)
				return err == nil && slices.Contains([]string{"tcp", "mqtt", "ws"}, u.Scheme)
			}
			if o := r.Options; o.TLS != (TLS{}) && len(o.BrokerURLs) > 0 && !slices.ContainsFunc(o.BrokerURLs, func(u string) bool { return !plain(u) }) {
				add(c.Errorf(path+".options.tls", "option", "%s.options.tls applies to ssl://, tls://, mqtts:// and wss:// brokers, and every broker URL is plain (tcp://, mqtt://, ws://): the connection would not use TLS", path))
			}
		case ReceiverMQTTListener:
			c.checkListenerAccess(add, path+".options", r.Options)
		case ReceiverHTTPListener:
			c.checkHTTPListener(add, path, r)
		}
		if err := checkListenAddr(r.Options.Listen); err != nil && (r.Type == ReceiverMQTTListener || r.Type == ReceiverHTTPListener) {
			add(c.Errorf(path+".options.listen", "listen", "%s.options.listen: %v", path, err))
		}
		c.checkReceiverLimits(add, path+".options", r)
		c.checkTLS(add, path+".options.tls", r.Options.TLS, r.Type != ReceiverMQTT)
		feeds := c.routesOf(r.ID)
		for j, s := range r.Topics {
			tp := fmt.Sprintf("%s.topics[%d]", path, j)
			if err := topics.ValidateFilter(s.Topic); err != nil && s.Topic != "" {
				add(c.Errorf(tp+".topic", "topic-filter", "%s.topic: %v", tp, err))
				continue
			}
			if r.Type == ReceiverHTTPListener || s.QoS == nil || *s.QoS != 0 {
				continue
			}
			if k := slices.IndexFunc(feeds, func(rt RouteConfig) bool { return topics.Overlaps(s.Topic, rt.Topic) }); k >= 0 {
				add(c.Warnf(tp+".qos", "qos0", "%s subscribes to %q with QoS 0, feeding route %q: the broker may drop such messages before gobridge sees them; use qos: 1",
					tp, s.Topic, feeds[k].ID))
			}
		}
		if r.Type != ReceiverMQTT || !r.Options.CleanSession {
			continue
		}
		shared := slices.IndexFunc(r.Topics, func(s Subscription) bool { return strings.HasPrefix(s.Topic, "$share/") })
		switch {
		case shared >= 0:
			add(c.Warnf(path+".options.clean_session", "share-clean-session",
				"%s has clean_session: true and the shared subscription %q: what the broker handed this instance and it has not acknowledged is discarded when it disconnects or dies, and no other instance can adopt its session; use clean_session: false",
				path, r.Topics[shared].Topic))
		case len(feeds) > 0:
			add(c.Warnf(path+".options.clean_session", "clean-session",
				"%s has clean_session: true and feeds route %q: the broker forgets what arrived while gobridge was away; use clean_session: false", path, feeds[0].ID))
		}
	}
}

// checkTLS checks that a certificate comes with its key, and then loads
// the files as the bridge will (TLS.Config). A server (the embedded
// listener) has no use for ca_file or insecure_skip_verify.
func (c *Config) checkTLS(add func(Problem), path string, t TLS, server bool) {
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		add(c.Errorf(path+".key_file", "tls", "%s: cert_file needs key_file", path))
	case t.KeyFile != "" && t.CertFile == "":
		add(c.Errorf(path+".cert_file", "tls", "%s: key_file needs cert_file", path))
	default:
		if _, err := t.Config(server); err != nil {
			add(c.Errorf(path, "tls", "%s: %v", path, err))
		}
	}
	if server && t.InsecureSkipVerify {
		add(c.Errorf(path+".insecure_skip_verify", "option", "%s.insecure_skip_verify applies to clients only", path))
	}
	switch {
	case !server && t.ClientCAFile != "":
		add(c.Errorf(path+".client_ca_file", "option", "%s.client_ca_file applies to the embedded listener only", path))
	case t.ClientCAFile != "" && t.CertFile == "":
		add(c.Errorf(path+".client_ca_file", "tls", "%s: client_ca_file needs cert_file and key_file (client certificates need a TLS listener)", path))
	}
}

// checkListenerAccess checks who may connect to an embedded listener
// (DESIGN.md §11.4): anonymous access only with allow_anonymous, or on a
// loopback listen with no users (a warning); passwords and ACL filters.
func (c *Config) checkListenerAccess(add func(Problem), path string, o ReceiverOptions) {
	certs := o.TLS.ClientCAFile != ""
	anonymous := o.AllowAnonymous || (len(o.Users) == 0 && !certs && isLoopback(o.Listen))
	switch {
	case o.AllowAnonymous || len(o.Users) > 0 || certs || checkListenAddr(o.Listen) != nil:
	case !anonymous:
		add(c.Errorf(path+".listen", "listener-anonymous",
			"%s: the listener on %s (not a loopback address) has no users and no tls.client_ca_file, so anyone on the network could publish; add users, or set allow_anonymous: true to accept that", path, o.Listen))
	default:
		add(c.Warnf(path+".listen", "listener-anonymous",
			"%s: no users, so any local client may connect to %s and publish; add users, or set allow_anonymous: true to say so", path, o.Listen))
	}
	if !anonymous && (o.Anonymous.Publish != nil || o.Anonymous.Subscribe != nil) {
		add(c.Errorf(path+".anonymous", "listener-anonymous", "%s.anonymous applies only when anonymous clients may connect (allow_anonymous: true)", path))
	}
	c.checkACL(add, path+".anonymous", o.Anonymous.Publish, o.Anonymous.Subscribe)
	seen := map[string]bool{}
	for i, u := range o.Users {
		up := fmt.Sprintf("%s.users[%d]", path, i)
		if seen[u.Username] {
			add(c.Errorf(up+".username", "duplicate-id", "%s.username: %q is listed twice", up, u.Username))
		}
		seen[u.Username] = true
		switch {
		case u.PasswordHash != "" && (u.Password != "" || u.PasswordFile != ""):
			add(c.Errorf(up+".password_hash", "user-password", "%s: password_hash excludes password and password_file", up))
		case u.PasswordHash == "" && u.Password == "" && u.PasswordFile == "" && !certs:
			add(c.Errorf(up, "user-password", "%s has no password, password_file or password_hash (and no tls.client_ca_file to log in with a certificate)", up))
		}
		if u.PasswordHash != "" {
			if _, err := bcrypt.Cost([]byte(u.PasswordHash)); err != nil {
				add(c.Errorf(up+".password_hash", "password-hash", "%s.password_hash is not a bcrypt hash (such as htpasswd -nbB makes; Mosquitto 2's mosquitto_passwd writes $7$ hashes, which are not): %v", up, err))
			}
		}
		c.checkACL(add, up, u.Publish, u.Subscribe)
	}
}

func (c *Config) checkACL(add func(Problem), path string, publish, subscribe []string) {
	for _, l := range []struct {
		key     string
		filters []string
	}{{"publish", publish}, {"subscribe", subscribe}} {
		for i, f := range l.filters {
			if err := topics.ValidateFilter(f); err != nil {
				p := fmt.Sprintf("%s.%s[%d]", path, l.key, i)
				add(c.Errorf(p, "topic-filter", "%s: %v", p, err))
			}
		}
	}
}

// checkReceiverLimits checks max_inflight_bytes against max_payload_bytes
// (and max_batch_bytes), and warns that without an outbox store an
// oversized message cannot be dead-lettered (http_listener answers 413).
func (c *Config) checkReceiverLimits(add func(Problem), path string, r ReceiverConfig) {
	o := r.Options
	// MQTT sends the keep-alive as whole seconds in 16 bits (paho truncates
	// and wraps): below 1s, or at 65536s, it reaches the broker as 0 (off).
	if ka := o.KeepAlive.D(); ka > 0 && (ka < time.Second || ka > 65535*time.Second) {
		add(c.Errorf(path+".keep_alive", "range", "%s.keep_alive %s is outside 1s..65535s (18h12m15s): MQTT carries it as whole seconds in 16 bits, so the broker would get %ds (0 turns keep-alive off)",
			path, ka, uint16(ka/time.Second)))
	}
	if o.MaxPayloadBytes <= 256<<20 && o.MaxInflightBytes > 0 && o.MaxInflightBytes < o.MaxPayloadBytes {
		add(c.Errorf(path+".max_inflight_bytes", "range", "%s.max_inflight_bytes (%d) must be at least max_payload_bytes (%d)",
			path, o.MaxInflightBytes, o.MaxPayloadBytes))
	} else if o.MaxInflightBytes > 0 && o.MaxInflightBytes < o.MaxBatchBytes {
		add(c.Errorf(path+".max_inflight_bytes", "range", "%s.max_inflight_bytes (%d) must be at least max_batch_bytes (%d)",
			path, o.MaxInflightBytes, o.MaxBatchBytes))
	}
	if c.Stores.Outbox == nil && c.Has(path+".max_payload_bytes") && r.Type != ReceiverHTTPListener {
		add(c.Warnf(path+".max_payload_bytes", "payload-without-outbox",
			"%s.max_payload_bytes: there is no stores.outbox, so a larger message is dropped and counted, not dead-lettered; configure stores.outbox to keep it", path))
	}
}

// isLoopback reports whether a host:port listen address accepts only local
// clients: localhost or a loopback IP. An empty host (":9090") listens
// everywhere.
func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback())
}

// checkListenConflicts reports two servers configured on one address, or
// on addresses that cannot both be bound (bindConflict).
func (c *Config) checkListenConflicts(add func(Problem)) {
	type server struct{ path, listen string }
	var used []server
	if l := c.Bridge.Admin.Listen; l != nil && *l != "" {
		used = append(used, server{"bridge.admin.listen", *l})
	}
	for i, r := range c.Receivers {
		if r.Type == ReceiverMQTT || r.Options.Listen == "" {
			continue
		}
		path := fmt.Sprintf("receivers[%d].options.listen", i)
		if k := slices.IndexFunc(used, func(s server) bool { return bindConflict(s.listen, r.Options.Listen) }); k >= 0 {
			add(c.Errorf(path, "listen", "%s: %s is already used by %s", path, r.Options.Listen, used[k].path))
			continue
		}
		used = append(used, server{path, r.Options.Listen})
	}
}

// bindConflict reports whether the listen addresses a and b cannot both be
// bound: they are equal, or they have the same port (not 0) and hosts that
// overlap. A wildcard host ("", 0.0.0.0, ::) takes the port on every
// address (Go listens dual-stack), and localhost is 127.0.0.1 and ::1.
func bindConflict(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	na, errPA := net.LookupPort("tcp", pa)
	nb, errPB := net.LookupPort("tcp", pb)
	if errA != nil || errB != nil || errPA != nil || errPB != nil {
		return a == b
	}
	if na != nb || na == 0 {
		return false // port 0: each listener gets a free port of its own
	}
	ha, hb = strings.ToLower(ha), strings.ToLower(hb)
	wildcard := func(h string) bool {
		ip, err := netip.ParseAddr(h)
		return h == "" || (err == nil && ip.IsUnspecified())
	}
	local := func(x, y string) bool { return x == "localhost" && (y == "127.0.0.1" || y == "::1") }
	return ha == hb || wildcard(ha) || wildcard(hb) || local(ha, hb) || local(hb, ha)
}

// routesOf returns the routes that take messages from receiver id.
func (c *Config) routesOf(id string) []RouteConfig {
	return slices.DeleteFunc(slices.Clone(c.Routes), func(r RouteConfig) bool { return id == "" || r.Receiver != id })
}

func (c *Config) checkSenders(add func(Problem)) {
	c.checkDuplicateIDs(add, "senders", ids(c.Senders, senderID))

	for i, s := range c.Senders {
		path := fmt.Sprintf("senders[%d]", i)
		op := path + ".options"
		c.checkOptions(add, op, "sender", s.Type, s.Options, senderOptions)
		switch s.Type {
		case SenderSQS:
			o := s.Options
			if o.QueueURL == "" {
				add(c.Errorf(op+".queue_url", "required", "%s.queue_url is required for an sqs sender", op))
			} else if err := checkHTTPURL(o.QueueURL); err != nil {
				add(c.Errorf(op+".queue_url", "url", "%s.queue_url: %v", op, err))
			} else if strings.HasSuffix(o.QueueURL, "/") { // q.fifo/ would be taken for a standard queue
				add(c.Errorf(op+".queue_url", "url", "%s.queue_url ends in '/': give it as AWS shows it, .../ACCOUNT/QUEUE", op))
			}
			if err := checkHTTPURL(o.Endpoint); o.Endpoint != "" && err != nil {
				add(c.Errorf(op+".endpoint", "url", "%s.endpoint: %v", op, err))
			}
			fifo := isFIFOQueue(o.QueueURL)
			switch {
			case fifo && o.MessageGroupID == "":
				add(c.Errorf(op+".message_group_id", "sqs-fifo",
					"%s.message_group_id is required for the FIFO queue %s (for example \"{topic}\")", op, o.QueueURL))
			case !fifo && o.MessageGroupID != "" && o.QueueURL != "":
				add(c.Errorf(op+".message_group_id", "sqs-fifo",
					"%s.message_group_id applies only to FIFO queues (URL ending in .fifo); %s is a standard queue", op, o.QueueURL))
			}
		case SenderHTTP:
			switch err := checkHTTPURL(s.Options.URL); {
			case s.Options.URL == "":
				add(c.Errorf(op+".url", "required", "%s.url is required for an http sender", op))
			case !c.checkURLTarget(add, op+".url", s.Options.URL):
			case err != nil:
				add(c.Errorf(op+".url", "url", "%s.url: %v", op, err))
			}
			c.checkTLS(add, op+".tls", s.Options.TLS, false)
			c.checkHostHeader(add, op+".headers", s.Options.Headers)
		}
	}
}

// checkHTTPListener checks an http_listener (DESIGN.md §11.6): a token is
// required unless allow_anonymous on a loopback listen; write_timeout
// exceeds settle_timeout, so a settled request can still be answered;
// headers are header names; topics take no qos.
func (c *Config) checkHTTPListener(add func(Problem), path string, r ReceiverConfig) {
	o := r.Options
	op := path + ".options"
	token := o.Token != "" || o.TokenFile != ""
	switch {
	case token && o.AllowAnonymous:
		add(c.Errorf(op+".allow_anonymous", "http-token", "%s: allow_anonymous excludes token and token_file", op))
	case o.AllowAnonymous && !isLoopback(o.Listen) && checkListenAddr(o.Listen) == nil:
		add(c.Errorf(op+".allow_anonymous", "http-token",
			"%s: allow_anonymous is allowed on a loopback listen only; on %s anyone on the network could publish: set token or token_file", op, o.Listen))
	case !token && !o.AllowAnonymous && c.Has(op+".token"):
		add(c.Errorf(op+".token", "http-token", "%s.token is empty (an unset ${VAR}?): every request would be refused; set it, or use token_file", op))
	case !token && !o.AllowAnonymous:
		add(c.Errorf(op, "http-token",
			"%s: the http_listener needs token or token_file (requests carry Authorization: Bearer TOKEN); on a loopback listen, allow_anonymous: true accepts requests without one", op))
	}
	c.checkBearer(add, op+".token", "http-token", o.Token)
	if o.WriteTimeout > 0 && o.WriteTimeout <= o.SettleTimeout {
		add(c.Errorf(op+".write_timeout", "range", "%s.write_timeout (%s) must exceed settle_timeout (%s): a settled request could not be answered",
			op, o.WriteTimeout, o.SettleTimeout))
	}
	for i, h := range o.Headers {
		if h == "" || strings.ContainsAny(h, " \t:\r\n") {
			add(c.Errorf(fmt.Sprintf("%s.headers[%d]", op, i), "option", "%s.headers[%d]: %q is not a header name", op, i, h))
		}
	}
	for j := range r.Topics {
		if tp := fmt.Sprintf("%s.topics[%d].qos", path, j); c.Has(tp) {
			add(c.Errorf(tp, "option", "%s applies to MQTT receivers; an http_listener's topics are the topics producers may post to", tp))
		}
	}
}
