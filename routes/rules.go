package routes

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/redact"
)

// Cross-field rules, written as plain Go. Each add()s its problems.

func (c *Config) checkVersion(add func(Problem)) {
	switch {
	case c.Version == 0 && !c.Has("version"):
		add(c.Errorf("", "required", "version is required (write version: 1)"))
	case c.Version != 1:
		add(c.Errorf("version", "version", "version must be 1 (the only config version); got %d", c.Version))
	}
}

func (c *Config) checkBridge(add func(Problem)) {
	if d := c.Bridge.LeaseTTL.D(); d > 0 && d < time.Second {
		add(c.Errorf("bridge.lease_ttl", "lease-ttl",
			"bridge.lease_ttl %s is below 1s: leases are renewed every third of it, and a renewal must reach the store in time", d))
	}
	a := c.Bridge.Admin
	for i, h := range a.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/@?# \t") {
			add(c.Errorf(fmt.Sprintf("bridge.admin.allowed_hosts[%d]", i), "allowed-hosts",
				"bridge.admin.allowed_hosts[%d]: %q is not a host name (write it as in the Host header, such as gobridge.plant.example)", i, h))
		}
	}
	l := a.Listen
	if l == nil || *l == "" {
		return
	}
	if err := checkListenAddr(*l); err != nil {
		add(c.Errorf("bridge.admin.listen", "listen", "bridge.admin.listen: %v", err))
		return
	}
	if a.Token != "" || a.TokenFile != "" {
		c.checkBearer(add, "bridge.admin.token", "admin-token", a.Token)
		return // a token_file that cannot be read is reported on its own
	}
	loop := isLoopback(*l)
	switch {
	case c.Has("bridge.admin.token") && loop:
		add(c.Warnf("bridge.admin.token", "admin-token",
			"bridge.admin.token is empty (an unset variable?), so the admin API runs without a token: reads are open to every local user and process"))
	case c.Has("bridge.admin.token"):
		add(c.Errorf("bridge.admin.token", "admin-token",
			"bridge.admin.token is empty (an unset variable?), and bridge.admin.listen %s is not loopback: anyone who reaches it could read dead letters (payloads included) and requeue or drop them", *l))
	case !loop:
		add(c.Errorf("bridge.admin.listen", "admin-token",
			"bridge.admin.listen %s is not loopback and there is no bridge.admin.token (or token_file): anyone who reaches it could read dead letters (payloads included) and requeue or drop them; set a token, or listen on 127.0.0.1", *l))
	}
}

// checkBearer reports a bearer token no request can present: a server
// trims the white space around an Authorization header's value.
func (c *Config) checkBearer(add func(Problem), path, rule string, tok Secret) {
	if s := string(tok); s != strings.TrimSpace(s) {
		at := path
		if !c.Has(path) {
			at = path + "_file" // read from the file
		}
		add(c.Errorf(at, rule, "%s: the token begins or ends with white space, which no request can carry in its Authorization header: remove it", at))
	}
}

func checkListenAddr(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not a host:port address", a)
	}
	if port == "" {
		return fmt.Errorf("%q has no port", a)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%q: %s is not a port (0 to 65535, or a service name)", a, port)
	}
	return nil
}

// storeOptions lists the options each store type reads.
var storeOptions = map[string][]string{
	"memory":   nil,
	"sqlite":   {"path", "sync", "done_retention"},
	"dynamodb": {"table", "region", "endpoint"},
}

func (c *Config) checkStores(add func(Problem)) {
	s := c.Stores.Outbox
	if s == nil {
		return
	}
	c.checkOptions(add, "stores.outbox.options", "store", s.Type, s.Options, storeOptions)
	if err := sqlitePathProblem(s.Options.Path); s.Type == "sqlite" && err != nil {
		add(c.Errorf("stores.outbox.options.path", "sqlite-path", "stores.outbox.options.path: %v", err))
	}
	if s.Type == "dynamodb" {
		c.checkDynamoDB(add, "stores.outbox.options", s.Options)
	}
	if s.Type == "sqlite" && s.Options.Sync == "normal" {
		add(c.Warnf("stores.outbox.options.sync", "sqlite-sync",
			"stores.outbox.options.sync is normal: an OS crash or power loss may lose the last acknowledged batches; use full to survive them"))
	}
}

// checkDynamoDB reports a DynamoDB table name, region or endpoint that
// the store cannot open: DynamoDB refuses the name, the SDK the region (a
// host label) or the endpoint (a URL with a scheme), so run would refuse
// to start.
func (c *Config) checkDynamoDB(add func(Problem), path string, o StoreOptions) {
	other := func(allowed string) func(rune) bool {
		return func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(allowed, r))
		}
	}
	if t := o.Table; len(t) < 3 || len(t) > 255 || strings.ContainsFunc(t, other("_-.")) {
		add(c.Errorf(path+".table", "dynamodb", "%s.table %q is not a DynamoDB table name (3 to 255 letters, digits, _ - .)", path, t))
	}
	if r := o.Region; r != "" && (len(r) > 63 || strings.ContainsFunc(r, other("-"))) {
		add(c.Errorf(path+".region", "dynamodb", "%s.region %q is not an AWS region (such as eu-west-1)", path, r))
	}
	if err := checkHTTPURL(o.Endpoint); o.Endpoint != "" && err != nil {
		add(c.Errorf(path+".endpoint", "url", "%s.endpoint: %v", path, err))
	}
}

// sqlitePathProblem says why no SQLite outbox can be opened at path,
// whatever the permissions: it is not a regular file, or it names a
// directory, or its nearest existing parent is not a directory.
func sqlitePathProblem(path string) error {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	if strings.HasSuffix(path, "/") {
		return fmt.Errorf("%s names a directory, not a file", path)
	}
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if st, err := os.Stat(dir); err == nil && !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		} else if err == nil || filepath.Dir(dir) == dir {
			return nil
		}
	}
}

// checkOptions reports every option that is set but does not apply to typ,
// whose options are options[typ] (a processor's options sit beside its
// type). An unknown type is left to the enum rule.
func (c *Config) checkOptions(add func(Problem), path, kind, typ string, opts any, options map[string][]string) {
	allowed, known := options[typ]
	if !known {
		return
	}
	v := reflect.ValueOf(opts)
	t := v.Type()
	for i := range t.NumField() {
		name := yamlName(t.Field(i))
		if v.Field(i).IsZero() || name == "type" || slices.Contains(allowed, name) {
			continue
		}
		if len(allowed) == 0 {
			add(c.Errorf(path+"."+name, "option", "%s: %s type %q has no options; remove %s", path, kind, typ, name))
			continue
		}
		add(c.Errorf(path+"."+name, "option", "%s: option %s does not apply to %s type %q (its options: %s)",
			path, name, kind, typ, strings.Join(allowed, ", ")))
	}
}

// checkDuplicateIDs reports the second and later uses of an id.
func (c *Config) checkDuplicateIDs(add func(Problem), list string, ids []string) {
	first := map[string]int{}
	for i, id := range ids {
		if id == "" {
			continue
		}
		if j, dup := first[id]; dup {
			line, _ := c.Position(fmt.Sprintf("%s[%d].id", list, j))
			add(c.Errorf(fmt.Sprintf("%s[%d].id", list, i), "duplicate-id",
				"%s[%d].id: %q is already used by %s[%d] (line %d)", list, i, id, list, j, line))
			continue
		}
		first[id] = i
	}
}

// checkTemplate checks one per-message template.
func (c *Config) checkTemplate(add func(Problem), path, tmpl string) {
	if _, err := message.ParseTemplate(tmpl); err != nil {
		msg := err.Error()
		if te, ok := errors.AsType[*message.TemplateError](err); ok {
			msg = te.Msg
		}
		add(c.Errorf(path, "placeholder", "%s: %s", path, msg))
	}
}

// brokerSchemes are the URL schemes the MQTT client dials.
var brokerSchemes = []string{"tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss"}

// checkBrokerURL and checkHTTPURL quote the URL redacted (package redact):
// it may carry a password or an API key.
func checkBrokerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not a URL such as tcp://127.0.0.1:1883", redact.URL(s))
	}
	if !slices.Contains(brokerSchemes, u.Scheme) {
		return fmt.Errorf("%q: scheme must be one of %s", redact.URL(s), strings.Join(brokerSchemes, ", "))
	}
	if err := PortProblem(u); err != nil {
		return fmt.Errorf("%q: %w", redact.URL(s), err)
	}
	if u.Port() == "" && u.Scheme != "ws" && u.Scheme != "wss" {
		// The client dials the host as it is: "missing port in address".
		return fmt.Errorf("%q has no port (the MQTT ports are 1883, and 8883 for TLS)", redact.URL(s))
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http:// or https:// URL", redact.URL(s))
	}
	if err := PortProblem(u); err != nil {
		return fmt.Errorf("%q: %w", redact.URL(s), err)
	}
	return nil
}

// PortProblem says why no connection can be made to the port of URL u
// (url.Parse takes any digits): it is not 1..65535. No port is none.
func PortProblem(u *url.URL) error {
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %s is not 1..65535", p)
		}
	}
	return nil
}

// checkURLTarget checks that a url template's scheme and host are literal
// text ended by '/', '?' or '#': a message must not choose where it goes
// (a value right after the host could add "@evil.example" or a port). It
// reports false when it added a problem.
func (c *Config) checkURLTarget(add func(Problem), path, tmpl string) bool {
	t, err := message.ParseTemplate(tmpl)
	if err != nil || t.IsLiteral() {
		return true // checkTemplate reports a bad template
	}
	prefix := t.LiteralPrefix()
	if i := strings.Index(prefix, "://"); i >= 0 && strings.ContainsAny(prefix[i+3:], "/?#") {
		return true
	}
	add(c.Errorf(path, "url-host", "%s: the scheme and host must be literal text followed by '/', '?' or '#'; a placeholder cannot choose the target", path))
	return false
}

// checkHostHeader refuses a header name no request can carry, and a Host
// header with placeholders: a message must not choose the virtual host it
// reaches. A literal Host is allowed.
func (c *Config) checkHostHeader(add func(Problem), path string, headers map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(headers)) {
		if !httpguts.ValidHeaderFieldName(k) {
			add(c.Errorf(path+"."+k, "option", "%s: %q is not an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", path, k))
		}
		switch http.CanonicalHeaderKey(k) {
		case "Idempotency-Key":
			add(c.Errorf(path+"."+k, "option", "%s.%s: the sender sets Idempotency-Key to each message's envelope ID, replacing this value; set the ID with an idempotency_key processor", path, k))
		case "Content-Length", "Transfer-Encoding", "Trailer":
			add(c.Errorf(path+"."+k, "option", "%s.%s: net/http writes %s itself and ignores this value; remove it", path, k, http.CanonicalHeaderKey(k)))
		}
		t, err := message.ParseTemplate(headers[k])
		if err == nil && HeaderValueProblem(t) {
			add(c.Errorf(path+"."+k, "option", "%s.%s: the value holds a control character other than tab, which no HTTP request can carry", path, k))
		}
		if !strings.EqualFold(k, "Host") {
			continue
		}
		if err == nil && !t.IsLiteral() {
			add(c.Errorf(path+"."+k, "host-header", "%s.%s: the Host header cannot come from a placeholder (a literal value is allowed)", path, k))
		}
	}
}

// HeaderValueProblem reports whether the literal text of header value
// template t, around its placeholders, holds a byte net/http refuses in a
// header value (a control character other than tab): every request would
// fail.
func HeaderValueProblem(t *message.Template) bool {
	return slices.ContainsFunc(t.Split(), func(p *message.Template) bool {
		return p.IsLiteral() && !httpguts.ValidHeaderFieldValue(p.LiteralPrefix())
	})
}
