package receivers

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// PendingPerAddress bounds the connections one remote address may hold open
// before they are admitted (authenticated), so one host opening silent
// connections cannot fill a server's connection limit and keep every
// client out. Admitted connections do not count.
const PendingPerAddress = 32

// Pending counts, by remote address, the connections a server holds that
// have not been admitted. The zero value is ready; it is safe for
// concurrent use.
type Pending struct {
	mu sync.Mutex
	n  map[string]int
}

// Hold counts c as pending and returns the func that ends its count (call
// it when c is admitted and when it closes; calls after the first do
// nothing), or nil when c's address already holds PendingPerAddress: refuse c.
func (p *Pending) Hold(c net.Conn) func() {
	host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n[host] >= PendingPerAddress {
		return nil
	}
	if p.n == nil {
		p.n = map[string]int{}
	}
	p.n[host]++
	return sync.OnceFunc(func() {
		p.mu.Lock()
		if p.n[host]--; p.n[host] <= 0 {
			delete(p.n, host)
		}
		p.mu.Unlock()
	})
}

// PendingListener is the Pending rule for an HTTP server: it counts each
// connection it accepts as pending until a handler calls Admit for one of
// its requests (or it closes), and closes at once, before any TLS
// handshake, one whose address holds too many. The server must set
// ConnContext to PendingConnContext.
type PendingListener struct {
	net.Listener
	Log *slog.Logger
	// Admitted says what admits a connection, for the refusal's log line.
	Admitted string

	pending Pending
	refused atomic.Uint64
}

func (l *PendingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if admit := l.pending.Hold(c); admit != nil {
			return &pendingConn{Conn: c, admit: admit}, nil
		}
		c.Close()
		if n := l.refused.Add(1); n&(n-1) == 0 {
			l.Log.Warn("connection refused: its address holds too many connections that have not made "+l.Admitted,
				"pending_per_address", PendingPerAddress, "remote", c.RemoteAddr().String(), "count", n)
		}
	}
}

// pendingConn is an accepted connection; admit ends its count as pending.
type pendingConn struct {
	net.Conn
	admit func()
}

func (c *pendingConn) Close() error {
	c.admit()
	return c.Conn.Close()
}

type connKey struct{}

// PendingConnContext is the http.Server ConnContext that lets Admit find a
// request's connection.
func PendingConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Admit ends the count as pending of req's connection.
func Admit(req *http.Request) {
	c, _ := req.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if pc, ok := c.(*pendingConn); ok {
		pc.admit()
	}
}
