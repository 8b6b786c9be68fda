package listener

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
)

// netListener serves mochi on a net.Listener, like mochi's listeners.Net,
// with the limits mochi lacks:
//
//   - At most maxConns connections are open (with a CONNECT or not); one
//     more is closed at once. mochi's own MaximumClients counts only
//     clients past their CONNECT.
//   - A connection must send its CONNECT (and finish its TLS handshake)
//     within connectTimeout: mochi v2.7.9 sets no deadline before the
//     CONNECT, so a silent connection would be held forever. mochi replaces
//     the deadline with the keep-alive one after the CONNECT.
//   - A failing Accept (EMFILE: out of file descriptors) is retried with
//     backoff (5ms doubling to 1s) instead of ending Serve, which would
//     stop the listener for good while its status still said listening.
//
// Close waits until every connection it handed to mochi has been released.
// mochi v2.7.9 adds a client to Server.Listeners.ClientsWg inside the
// goroutine that serves it, while Server.Close waits on that group: a
// connection accepted during shutdown races with the Wait (the race detector
// reports it, and the client may outlive Close). Waiting here, before mochi's
// Wait, orders every such Add before it.
//
// Close also does not call mochi's CloseFn: in v2.7.9 it runs
// Clients.GetByListener, which read-locks the client map twice (via Len), so a
// client detaching in between (Clients.Delete waiting for the write lock)
// deadlocks shutdown for good. Close disconnects the listener's clients
// itself, taking the client map's read lock once.
type netListener struct {
	id             string
	ln             net.Listener
	srv            *mochi.Server
	log            *slog.Logger
	maxConns       int
	connectTimeout time.Duration

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup // establish calls in progress
	refused uint64         // connections over maxConns
}

var _ listeners.Listener = (*netListener)(nil)

func (l *netListener) Init(*slog.Logger) error {
	l.done = make(chan struct{})
	l.conns = map[net.Conn]struct{}{}
	return nil
}
func (l *netListener) ID() string       { return l.id }
func (l *netListener) Address() string  { return l.ln.Addr().String() }
func (l *netListener) Protocol() string { return l.ln.Addr().Network() }

// Serve accepts connections until the listener is closed, handing each to
// establish in its own goroutine, which Close waits for.
func (l *netListener) Serve(establish listeners.EstablishFn) {
	var backoff time.Duration
	var failures uint64
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			failures++
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if failures&(failures-1) == 0 {
				l.log.Warn("accept failed; retrying", "error", err, "attempt", failures, "retry_in", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
				continue
			case <-l.done:
				t.Stop()
				return
			}
		}
		backoff, failures = 0, 0
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		if len(l.conns) >= l.maxConns {
			l.refused++
			n := l.refused
			l.mu.Unlock()
			conn.Close()
			if n&(n-1) == 0 {
				l.log.Warn("connection refused: max_clients reached", "max_clients", l.maxConns, "remote", conn.RemoteAddr().String(), "count", n)
			}
			continue
		}
		l.conns[conn] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		_ = conn.SetDeadline(time.Now().Add(l.connectTimeout))
		go func() {
			defer l.wg.Done()
			_ = establish(l.id, conn) // mochi logs refused connections itself
			conn.Close()
			l.mu.Lock()
			delete(l.conns, conn)
			l.mu.Unlock()
		}()
	}
}

// Close stops accepting, tells the clients mochi knows that the server is
// shutting down and closes them, closes the connections it does not know
// yet, and waits for every establish call.
// mochi's CloseFn is not used (see netListener).
func (l *netListener) Close(listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.done)
	l.ln.Close()
	l.mu.Unlock()

	for _, cl := range l.srv.Clients.GetAll() {
		if cl.Net.Listener == l.id && !cl.Closed() {
			_ = l.srv.DisconnectClient(cl, packets.ErrServerShuttingDown)
		}
	}
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
