package listener

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// fuzzTarget is one listener per fuzzing process: anonymous clients may
// publish to factory/public/#, user press-1 to factory/press-1/#; payloads
// over 1024 bytes are truncated.
type fuzzTarget struct {
	addr string

	mu       sync.Mutex
	identity string // of the connection in progress
	bad      []string
}

var (
	fuzzOnce sync.Once
	fuzzT    *fuzzTarget
)

func startFuzzTarget(f *testing.F) *fuzzTarget {
	fuzzOnce.Do(func() {
		ft := &fuzzTarget{}
		l, err := New(Options{
			ID: "fuzz", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}, MaxPayloadBytes: 1024,
			AllowAnonymous: true, Anonymous: ACL{Publish: []string{"factory/public/#"}, Subscribe: []string{"factory/#"}},
			Users:          []User{{Username: "press-1", Password: "pw", ACL: ACL{Publish: []string{"factory/press-1/#"}}}},
			ConnectTimeout: 2 * time.Second,
		}, testsink.Func(ft.accept), nil)
		if err != nil {
			f.Fatal(err)
		}
		go func() { _ = l.Run(context.Background()) }() // lives as long as the fuzzing process
		<-l.Ready()
		ft.addr = l.Addr().String()
		fuzzT = ft
	})
	return fuzzT
}

// accept checks what reaches the sink against the ACL of the connection in
// progress and the payload limit.
func (ft *fuzzTarget) accept(_ context.Context, m receivers.Message, done func()) {
	defer done()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	prefix := "factory/public/"
	if ft.identity != "" {
		prefix = "factory/" + ft.identity + "/"
	}
	switch {
	case !strings.HasPrefix(m.Topic+"/", prefix):
		ft.bad = append(ft.bad, "identity "+ft.identity+" published to "+m.Topic)
	case m.Truncated && (m.Size <= 1024 || len(m.Payload) != 1024):
		ft.bad = append(ft.bad, "bad truncation")
	case !m.Truncated && (len(m.Payload) > 1024 || m.Size != len(m.Payload)):
		ft.bad = append(ft.bad, "oversized payload routed")
	}
}

func connectAs(username, password string) []byte {
	flags := byte(0x02)
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0, 0, 60}
	body = binary.BigEndian.AppendUint16(body, 4)
	body = append(body, "fuzz"...)
	if username != "" {
		flags |= 0xC0
		for _, s := range []string{username, password} {
			body = binary.BigEndian.AppendUint16(body, uint16(len(s)))
			body = append(body, s...)
		}
	}
	body[7] = flags
	return append(append([]byte{0x10}, remainingLength(len(body))...), body...)
}

func publishPacket(topic string, qos byte, payload []byte) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	body = append(body, topic...)
	if qos > 0 {
		body = append(body, 0, 1)
	}
	body = append(body, payload...)
	return append(append([]byte{0x30 | qos<<1}, remainingLength(len(body))...), body...)
}

// FuzzListener_Packets sends arbitrary bytes after a valid CONNECT (as
// press-1 or anonymous) to a running listener. Whatever mochi decodes from
// them, our hooks must let through to the sink only what the connection's
// ACL allows, within the payload limit, must not panic, and must leave the
// listener serving.
func FuzzListener_Packets(f *testing.F) {
	ft := startFuzzTarget(f)
	f.Add(true, publishPacket("factory/press-1/a", 1, []byte("ok")))
	f.Add(true, publishPacket("factory/press-2/a", 1, []byte("denied")))
	f.Add(false, publishPacket("factory/public/a", 2, []byte("ok")))
	f.Add(false, publishPacket("factory/press-1/a", 0, []byte("denied")))
	f.Add(false, publishPacket("factory/public/big", 1, make([]byte, 3000)))
	f.Add(true, append(publishPacket("factory/press-1/x", 2, nil), 0x62, 2, 0, 1)) // PUBREL
	f.Add(false, []byte{0x82, 8, 0, 1, 0, 3, 'a', '/', '#', 1})                    // SUBSCRIBE
	f.Add(true, []byte{0x30, 0xff, 0xff, 0xff, 0x7f})                              // 256 MiB PUBLISH header
	f.Add(false, []byte{0x10, 2, 0, 0})                                            // second CONNECT
	f.Fuzz(func(t *testing.T, asUser bool, data []byte) {
		conn, err := net.Dial("tcp", ft.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ft.mu.Lock()
		ft.identity = map[bool]string{true: "press-1"}[asUser]
		ft.mu.Unlock()
		user, pw := "", ""
		if asUser {
			user, pw = "press-1", "pw"
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(append(connectAs(user, pw), data...)); err != nil {
			return // the listener closed the connection early: fine
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		// The listener processes the packets in order, then sees the end of
		// the stream and closes: after that, no hook of this connection runs.
		if _, err := io.Copy(io.Discard, conn); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("connection not closed by the listener: %v", err)
		}
		ft.mu.Lock()
		bad := ft.bad
		ft.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("the sink got what it must not: %v", bad)
		}
		if !connectAndDrop(ft.addr, "probe") {
			t.Fatal("the listener no longer accepts a valid CONNECT")
		}
	})
}

// FuzzAccess checks authentication and the ACLs against oracles written
// without the topics package.
func FuzzAccess(f *testing.F) {
	a, err := newAccess(Options{
		Listen: "0.0.0.0:1883", Topics: []string{"factory/#"},
		Users: []User{
			{Username: "press-1", Password: "s3cret", ACL: ACL{Publish: []string{"factory/press-1/#"}}},
			{Username: "viewer", Password: "v", ACL: ACL{Subscribe: []string{"status/+"}}},
		},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("press-1", "s3cret", "", "factory/press-1/x")
	f.Add("viewer", "v", "", "status/+")
	f.Add("", "", "press-1", "factory/press-1")
	f.Add("press-1", "", "viewer", "status/#")
	f.Fuzz(func(t *testing.T, username, password, cn, topic string) {
		identity, ok := a.authenticate(username, []byte(password), cn)
		name := username
		if name == "" {
			name = cn
		}
		byCert := cn != "" && cn == name
		switch {
		case name == "" && ok:
			t.Fatal("an anonymous client was admitted on a listener that does not allow it")
		case ok && identity != name:
			t.Fatalf("admitted as %q, sent %q/%q", identity, username, cn)
		case !byCert && name == "press-1" && ok != (password == "s3cret"):
			t.Fatalf("press-1 with password %q: admitted = %v", password, ok)
		case !byCert && name != "press-1" && name != "viewer" && ok:
			t.Fatalf("unknown user %q admitted without a certificate", name)
		case byCert && !ok:
			t.Fatalf("a certificate for %q was refused", cn)
		}
		if ok && identity == "press-1" && a.acl(identity).mayPublish(topic) &&
			topic != "factory/press-1" && !strings.HasPrefix(topic, "factory/press-1/") {
			t.Fatalf("press-1 may publish to %q", topic)
		}
		filter := topic
		if rest, ok := strings.CutPrefix(filter, "$share/"); ok {
			_, filter, _ = strings.Cut(rest, "/")
		}
		if levels := strings.Split(filter, "/"); a.acl("viewer").maySubscribe(topic) &&
			(len(levels) != 2 || levels[0] != "status" || strings.ContainsAny(levels[1], "#")) {
			t.Fatalf("viewer may subscribe to %q", topic)
		}
		if a.acl("viewer").mayPublish(topic) != a.acl("nobody-by-cert").mayPublish(topic) {
			t.Fatal("the default publish ACL differs between a user without one and a certificate name")
		}
	})
}

// connectAndDrop is in shutdown_test.go.
var _ = connectAndDrop
