package listener

import (
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
)

// netListener serves mochi on a net.Listener, like mochi's listeners.Net,
// with the limits mochi v2.7.9 lacks:
//
//   - At most maxConns connections are open, with a CONNECT or not (mochi's
//     MaximumClients counts only clients past it); one more is closed at once.
//     Of those, one remote address may hold at most receivers.PendingPerAddress that
//     have not been admitted (an authenticated CONNECT): one host opening
//     silent connections cannot keep every publisher out.
//   - A connection must send its CONNECT (and finish its TLS handshake)
//     within connectTimeout: mochi sets no deadline before the CONNECT, and
//     replaces this one with the keep-alive deadline after it.
//   - A connection's first packet, read before any authentication, may
//     announce at most MaxConnectBytes: mochi allocates a packet's whole
//     announced length before reading it, so maxConns connections that
//     announce the hard packet limit and then trickle would hold
//     maxConns × 2 × that much memory (trackedConn).
//   - Each write to a connection must complete within writeTimeout, or the
//     connection is closed (trackedConn): mochi's only deadline is the
//     keep-alive (none with keep-alive 0), and a client that stops reading
//     blocked the writes of its acknowledgements, whose messages then held
//     the receiver's max_inflight_bytes and every other publisher.
//   - A failing Accept (EMFILE) is retried with backoff (5ms doubling to 1s)
//     instead of ending Serve, which would stop the listener for good while
//     its status still said listening.
//
// Close waits for every connection it handed to mochi: mochi adds a client
// to Server.Listeners.ClientsWg inside the goroutine that serves it, which
// races with the Wait in Server.Close. Close also disconnects the
// listener's clients itself instead of calling mochi's CloseFn, whose
// Clients.GetByListener read-locks the client map twice: a client detaching
// in between (waiting for the write lock) deadlocks shutdown.
type netListener struct {
	id             string
	ln             net.Listener
	srv            *mochi.Server
	log            *slog.Logger
	maxConns       int
	connectTimeout time.Duration
	writeTimeout   time.Duration

	mu      sync.Mutex
	closed  bool
	done    chan struct{} // closed by Close
	conns   map[net.Conn]struct{}
	pending receivers.Pending
	wg      sync.WaitGroup // establish calls in progress
	refused uint64         // connections refused (maxConns, pending, CONNECT size)
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
		_ = conn.SetDeadline(time.Now().Add(l.connectTimeout)) // the TLS handshake's writes too
		tc := &trackedConn{Conn: conn, closed: make(chan struct{}), refuse: l.refuseConnect, writeTimeout: l.writeTimeout}
		conn = tc
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			conn.Close()
			return
		}
		if why := l.full(tc); why != "" {
			l.refused++
			n := l.refused
			l.mu.Unlock()
			conn.Close()
			if n&(n-1) == 0 {
				l.log.Warn("connection refused: "+why, "max_clients", l.maxConns, "remote", conn.RemoteAddr().String(), "count", n)
			}
			continue
		}
		l.conns[conn] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
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

// full says why c is refused, "" when it is not; else c counts as pending
// until admitted or closed. Call it holding mu.
func (l *netListener) full(c *trackedConn) string {
	if len(l.conns) >= l.maxConns {
		return "max_clients reached"
	}
	if c.admit = l.pending.Hold(c); c.admit == nil {
		return "its address holds too many connections that have not sent an accepted CONNECT"
	}
	return ""
}

// Close stops accepting, disconnects the clients mochi knows (server
// shutting down), closes the connections it does not know yet, and waits
// for every establish call.
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
	conns := slices.Collect(maps.Keys(l.conns))
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	l.wg.Wait()
}

// MaxConnectBytes bounds the remaining length a connection's first packet
// (its CONNECT: client ID, credentials, Will) may announce; a larger one
// closes the connection before mochi reads it.
const MaxConnectBytes = 32 << 10

// errConnectTooLarge ends a connection whose first packet announces more
// than MaxConnectBytes.
var errConnectTooLarge = errors.New("first packet over MaxConnectBytes")

func (l *netListener) refuseConnect(c net.Conn, announced int) {
	l.mu.Lock()
	l.refused++
	n := l.refused
	l.mu.Unlock()
	if n&(n-1) == 0 {
		l.log.Warn("connection refused: its CONNECT announces more than the limit (a large Will payload?)",
			"bytes", announced, "limit", MaxConnectBytes, "remote", c.RemoteAddr().String(), "count", n)
	}
}

// trackedConn is a connection handed to mochi; closed is closed with it.
// mochi closes a client's connection when it stops the client (a takeover
// by the same client ID, a disconnect, shutdown) while the client's read
// loop may still wait in OnPublish: the hook ends that wait on closed.
// Until the fixed header of the first packet is read, Read also checks the
// length it announces (see MaxConnectBytes).
type trackedConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
	head   []byte // the first packet's fixed header so far; nil once checked
	refuse func(c net.Conn, announced int)
	admit  func() // when admitted or closed (once; see Pending.Hold); nil: not counted

	writeTimeout time.Duration
}

// admitted ends the connection's count as pending.
func (c *trackedConn) admitted() {
	if c.admit != nil {
		c.admit()
	}
}

// SetDeadline sets the read deadline only (mochi's keep-alive, which would
// also clear a write's deadline): each Write sets its own.
func (c *trackedConn) SetDeadline(t time.Time) error { return c.Conn.SetReadDeadline(t) }

// Write closes the connection when p is not written within writeTimeout.
// mochi writes a packet in one call, under the client's lock.
func (c *trackedConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	n, err := c.Conn.Write(p)
	if err != nil {
		c.Close()
	}
	return n, err
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.refuse == nil || n == 0 {
		return n, err
	}
	// The fixed header: a type byte, then the remaining length in up to
	// four bytes of 7 bits, the high bit set on all but the last.
	for _, b := range p[:n] {
		c.head = append(c.head, b)
		if len(c.head) == 1 {
			continue
		}
		if b&0x80 != 0 && len(c.head) < 5 {
			continue
		}
		length, shift := 0, 0
		for _, lb := range c.head[1:] {
			length |= int(lb&0x7f) << shift
			shift += 7
		}
		refuse := c.refuse
		c.head, c.refuse = nil, nil
		if length > MaxConnectBytes {
			refuse(c, length)
			return 0, errConnectTooLarge
		}
		break
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	c.admitted()
	return c.Conn.Close()
}
