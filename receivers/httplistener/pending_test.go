package httplistener

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

// attacker dials from 127.0.0.2, another address than the producers'.
var attacker = net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}

// request sends one keep-alive request on conn (with token, when not empty)
// and returns the answer's status; the connection stays open.
func request(t *testing.T, conn net.Conn, token string) int {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	auth := ""
	if token != "" {
		auth = "Authorization: Bearer " + token + "\r\n"
	}
	if _, err := io.WriteString(conn, "POST /v1/publish/plant/a HTTP/1.1\r\nHost: x\r\n"+auth+"Content-Length: 1\r\n\r\nx"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// closedByServer reads from conn until the server closes it; it fails the
// test when the server keeps it open for 10s.
func closedByServer(t *testing.T, conn net.Conn) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, conn); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the receiver kept the connection open")
	}
}

// TestReceiver_OneAddressCannotHoldEveryConnection: one host opening
// ConnsPerRequest × MaxInFlight silent connections kept every producer out
// until ReadHeaderTimeout, again and again. An address may hold at most
// PendingPerAddress connections that have not made an authenticated
// request; admitted ones do not count, so one host may keep many open.
func TestReceiver_OneAddressCannotHoldEveryConnection(t *testing.T) {
	t.Parallel()
	const maxConns = ConnsPerRequest * 20
	b := setup(t, Options{MaxInFlight: 20, ReadHeaderTimeout: time.Minute}, newSettlingSink(receivers.OutcomeCommitted, false))
	addr := b.r.Addr().String()
	var silent []net.Conn
	for range maxConns + 8 {
		c, err := attacker.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	closedByServer(t, silent[len(silent)-1]) // over PendingPerAddress: refused
	for i := range maxConns - receivers.PendingPerAddress - 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // held open, admitted: it does not count
		if st := request(t, c, testToken); st != http.StatusOK {
			t.Fatalf("producer connection %d: %d", i, st)
		}
	}
}

// TestReceiver_UnauthenticatedConnectionsStayPending: a connection whose
// requests are refused 401 is not admitted; once they close, the address
// may connect again.
func TestReceiver_UnauthenticatedConnectionsStayPending(t *testing.T) {
	t.Parallel()
	b := setup(t, Options{ReadHeaderTimeout: time.Minute}, newSettlingSink(receivers.OutcomeCommitted, false))
	addr := b.r.Addr().String()
	var refused []net.Conn
	for range receivers.PendingPerAddress {
		c, err := attacker.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if st := request(t, c, ""); st != http.StatusUnauthorized {
			t.Fatalf("without a token: %d", st)
		}
		refused = append(refused, c)
	}
	one, err := attacker.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	closedByServer(t, one)
	for _, c := range refused {
		c.Close()
	}
	// Their counts end as the receiver sees them close: one more is served.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		c, err := attacker.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		_, _ = io.WriteString(c, "POST /v1/publish/plant/a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+testToken+"\r\nContent-Length: 1\r\n\r\nx")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the address is still full a minute after its connections closed: %v", err)
		}
	}
}

// TestReceiver_TLSConnectionsAreAdmitted: over TLS too, a connection that
// made an authenticated request no longer counts as pending.
func TestReceiver_TLSConnectionsAreAdmitted(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	b := setup(t, Options{MaxInFlight: 20, TLS: files.Server(t, false)}, newSettlingSink(receivers.OutcomeCommitted, false))
	for i := range receivers.PendingPerAddress + 8 {
		c, err := tls.Dial("tcp", b.r.Addr().String(), files.Client(t, false))
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		defer c.Close()
		if st := request(t, c, testToken); st != http.StatusOK {
			t.Fatalf("connection %d: %d", i, st)
		}
	}
}
