package routes

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/gobridge/gobridge/message"
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
	if l := c.Bridge.Admin.Listen; l != nil && *l != "" {
		if err := checkListenAddr(*l); err != nil {
			add(c.Errorf("bridge.admin.listen", "listen", "bridge.admin.listen: %v", err))
		}
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
	return nil
}

// storeOptions lists the options each store type reads.
var storeOptions = map[string][]string{
	"memory":   nil,
	"sqlite":   {"path", "sync", "done_retention"},
	"dynamodb": {"table", "region", "endpoint"},
}

func (c *Config) checkStores(add func(Problem)) {
	for _, s := range []struct {
		path string
		cfg  *StoreConfig
	}{{"stores.outbox", c.Stores.Outbox}} {
		if s.cfg == nil {
			continue
		}
		allowed, known := storeOptions[s.cfg.Type]
		if !known {
			continue // the enum rule reports it
		}
		c.checkOptions(add, s.path+".options", "store", s.cfg.Type, s.cfg.Options, allowed)
		if s.cfg.Type == "sqlite" {
			switch s.cfg.Options.Sync {
			case "full":
			case "normal":
				add(c.Warnf(s.path+".options.sync", "sqlite-sync",
					"%s.options.sync is normal: an OS crash or power loss may lose the last acknowledged batches; use full to survive them", s.path))
			default:
				add(c.Errorf(s.path+".options.sync", "enum", "%s.options.sync must be one of full, normal; got %q", s.path, s.cfg.Options.Sync))
			}
			if n := s.cfg.Options.DoneRetention; n < 0 {
				add(c.Errorf(s.path+".options.done_retention", "range", "%s.options.done_retention must be at least 0; got %d", s.path, n))
			}
		}
	}
}

// checkOptions reports every option that is set but does not apply to typ.
func (c *Config) checkOptions(add func(Problem), path, kind, typ string, opts any, allowed []string) {
	v := reflect.ValueOf(opts)
	t := v.Type()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if v.Field(i).IsZero() || slices.Contains(allowed, name) {
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

// templateProblem checks one per-message template.
func (c *Config) checkTemplate(add func(Problem), path, tmpl string) {
	if tmpl == "" {
		return
	}
	if _, err := message.ParseTemplate(tmpl); err != nil {
		msg := err.Error()
		var te *message.TemplateError
		if errors.As(err, &te) {
			msg = te.Msg
		}
		add(c.Errorf(path, "placeholder", "%s: %s", path, msg))
	}
}

func (c *Config) checkTemplateMap(add func(Problem), path string, m map[string]string) {
	for _, k := range sortedKeys(m) {
		c.checkTemplate(add, path+"."+k, m[k])
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// brokerSchemes are the URL schemes the MQTT client dials.
var brokerSchemes = []string{"tcp", "mqtt", "ssl", "tls", "mqtts", "ws", "wss"}

func checkBrokerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%q is not a URL such as tcp://127.0.0.1:1883", s)
	}
	if !slices.Contains(brokerSchemes, u.Scheme) {
		return fmt.Errorf("%q: scheme must be one of %s", s, strings.Join(brokerSchemes, ", "))
	}
	return nil
}

func checkHTTPURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%q is not an http:// or https:// URL", s)
	}
	return nil
}
