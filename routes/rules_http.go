package routes

import (
	"fmt"
	"strings"
)

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
