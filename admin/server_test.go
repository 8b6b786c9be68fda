package admin_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
)

// TestServer_LetsGoOfAClientThatDoesNotRead: a client that asks for a dead
// letter larger than the socket buffers and never reads the answer is
// disconnected once Timeouts.Answer has passed since the answer began;
// without that bound its connection and handler were held forever, and 64
// such clients shut the admin server (and /healthz) out for good.
func TestServer_LetsGoOfAClientThatDoesNotRead(t *testing.T) {
	fx := setup(t, "")
	ids := deadLetters(t, fx.st, "alarms", 1, []byte(strings.Repeat("x", 16<<20)))
	srv := admin.NewServer(fx.h, admin.Timeouts{ReadHeader: time.Minute, Read: time.Minute, Idle: time.Minute, Answer: 200 * time.Millisecond})
	closed := make(chan struct{})
	srv.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			close(closed)
		}
	}
	addr := strings.TrimPrefix(httptestServer(t, srv), "http://")
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	conn, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /api/dead-letters/%s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ids[0])
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the server still holds the connection of a client that does not read, 20 s after it asked")
	}
	// The client got the beginning of the answer and then the end of the
	// connection, not the whole letter.
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, err = bufio.NewReader(resp.Body).WriteTo(new(strings.Builder))
	}
	if err == nil {
		t.Fatal("the whole answer arrived")
	}
}

// httptestServer serves srv on a loopback port until the test ends and
// returns its URL.
func httptestServer(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
