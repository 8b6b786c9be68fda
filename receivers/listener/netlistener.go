package listener

import (
	"log/slog"
	"net"
	"sync"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// netListener serves mochi on a net.Listener, like mochi's listeners.Net,
// except that Close waits until every connection it handed to mochi has been
// released. mochi v2.7.9 adds a client to Server.Listeners.ClientsWg inside
// the goroutine that serves it, while Server.Close waits on that group: a
// connection accepted during shutdown races with the Wait (the race detector
// reports it, and the client may outlive Close). Waiting here, before mochi's
// Wait, orders every such Add before it.
//
// Close also does not call mochi's CloseFn: in v2.7.9 it runs
// Clients.GetByListener, which read-locks the client map twice (via Len), so a
// client detaching in between (Clients.Delete waiting for the write lock)
// deadlocks shutdown for good. disconnect closes the listener's clients with a
// single read lock instead.
type netListener struct {
	id         string
	ln         net.Listener
	disconnect func(listenerID string)

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup // establish calls in progress
}

var _ listeners.Listener = (*netListener)(nil)

func newNetListener(id string, ln net.Listener, disconnect func(listenerID string)) *netListener {
	return &netListener{id: id, ln: ln, disconnect: disconnect, conns: map[net.Conn]struct{}{}}
}

func (l *netListener) Init(*slog.Logger) error { return nil }
func (l *netListener) ID() string              { return l.id }
func (l *netListener) Address() string         { return l.ln.Addr().String() }
func (l *netListener) Protocol() string        { return l.ln.Addr().Network() }

// Serve accepts connections until the listener is closed, handing each to
// establish in its own goroutine, which Close waits for.
func (l *netListener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		l.conns[conn] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.wg.Done()
			_ = establish(l.id, conn) // mochi logs refused connections itself
			l.mu.Lock()
			delete(l.conns, conn)
			l.mu.Unlock()
		}()
	}
}

// Close stops accepting, disconnects the clients mochi knows, closes the
// connections it does not know yet, and waits for every establish call.
// mochi's CloseFn is not used (see netListener).
func (l *netListener) Close(listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.ln.Close()
	l.mu.Unlock()

	l.disconnect(l.id)
	l.mu.Lock()
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
