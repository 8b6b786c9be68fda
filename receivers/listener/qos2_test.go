package listener

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// rawClient is an MQTT 5 client that writes the packets it is given (as
// mochi's encoders make them) and reads the broker's answers one by one.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// dialRaw connects clientID with a persistent session (expiry 600 s) and
// returns the client and its CONNACK.
func dialRaw(t *testing.T, b *bundle, clientID string, cleanStart bool) (*rawClient, packets.Packet) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect:    packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: cleanStart, Keepalive: 30, ClientIdentifier: clientID},
		Properties: packets.Properties{SessionExpiryInterval: 600, SessionExpiryIntervalFlag: true}})
	return c, c.next()
}

func (c *rawClient) send(pk packets.Packet) {
	c.t.Helper()
	pk.ProtocolVersion = 5
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	case packets.Pubrel:
		err = pk.PubrelEncode(&buf)
	}
	if err == nil {
		_, err = c.conn.Write(buf.Bytes())
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// next reads the next packet: its type, packet ID and reason code.
func (c *rawClient) next() packets.Packet {
	c.t.Helper()
	pk := packets.Packet{ProtocolVersion: 5}
	b, err := c.r.ReadByte()
	if err == nil {
		err = pk.FixedHeader.Decode(b)
	}
	if err == nil {
		pk.FixedHeader.Remaining, _, err = packets.DecodeLength(c.r)
	}
	buf := make([]byte, pk.FixedHeader.Remaining)
	if err == nil {
		_, err = io.ReadFull(c.r, buf)
	}
	if err == nil {
		switch pk.FixedHeader.Type {
		case packets.Connack:
			err = pk.ConnackDecode(buf)
		case packets.Pubrec:
			err = pk.PubrecDecode(buf)
		case packets.Pubcomp:
			err = pk.PubcompDecode(buf)
		}
	}
	if err != nil {
		c.t.Fatalf("read a packet: %v", err)
	}
	return pk
}

// TestListener_ResentQoS2MessageIsAcknowledged: an MQTT 5 publisher whose
// connection dropped before it got the PUBREC of a QoS 2 message resends it
// (DUP) after reconnecting with its session. gobridge took it (its PUBREC
// is sent after settle), so the answer must be a PUBREC that says so, and
// the copy must not reach the routes again. mochi answered PUBREC 0x91
// (packet identifier in use): the publisher saw a failure for a message
// that was committed.
func TestListener_ResentQoS2MessageIsAcknowledged(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), nil)
	id := "qos2-" + t.Name()
	c, _ := dialRaw(t, b, id, true)
	pub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "factory/q2", PacketID: 7, Payload: []byte("once")}
	c.send(pub)
	if p := c.next(); p.FixedHeader.Type != packets.Pubrec || p.ReasonCode != 0 {
		t.Fatalf("first PUBREC: type %d reason %#x", p.FixedHeader.Type, p.ReasonCode)
	}
	c.conn.Close() // as if that PUBREC was lost
	testsink.Eventually(t, "the old connection ended", func() bool { cl, ok := b.l.srv.Clients.Get(id); return ok && cl.Closed() })

	c, connack := dialRaw(t, b, id, false)
	if !connack.SessionPresent {
		t.Fatal("the session is gone")
	}
	pub.FixedHeader.Dup = true
	c.send(pub)
	for range 2 { // the broker resends the session's PUBREC, and answers the DUP
		if p := c.next(); p.FixedHeader.Type != packets.Pubrec || p.PacketID != 7 || p.ReasonCode != 0 {
			t.Fatalf("PUBREC for the resent message: type %d id %d reason %#x, want a PUBREC 7 reason 0", p.FixedHeader.Type, p.PacketID, p.ReasonCode)
		}
	}
	c.send(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: 7})
	if p := c.next(); p.FixedHeader.Type != packets.Pubcomp || p.ReasonCode != 0 {
		t.Fatalf("PUBCOMP: type %d reason %#x", p.FixedHeader.Type, p.ReasonCode)
	}
	if d := b.sink.Next(t); string(d.Msg.Payload) != "once" || len(b.sink.C) != 0 {
		t.Fatalf("the sink got %q and %d more", d.Msg.Payload, len(b.sink.C))
	}
}
