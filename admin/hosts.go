package admin

import (
	"net"
	"net/netip"
	"strings"
)

// consolePattern is the console page's route; it is served without the
// token (the page asks for it).
const consolePattern = "GET /console"

// hostAllowed reports whether a request's Host header names this server:
// empty (HTTP/1.0), localhost or a *.localhost name (browsers resolve them
// to loopback themselves), an IP literal (a rebinding attack needs a name
// the attacker's DNS answers for), the listen host or an allowed name.
func (h *Handler) hostAllowed(host string) bool {
	name := hostOnly(host)
	if name == "" || name == "localhost" || strings.HasSuffix(name, ".localhost") || h.hosts[name] {
		return true
	}
	_, err := netip.ParseAddr(name)
	return err == nil
}

// hostOnly returns host (a Host header value or a host:port address)
// without its port, brackets and trailing dot, in lower case.
func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.ToLower(strings.TrimSuffix(host, "."))
}

// loopback reports whether addr (host:port) is a loopback address.
func loopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().IsLoopback()
}
