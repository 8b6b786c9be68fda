package listener

import (
	"bytes"
	"crypto/tls"
	"strings"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/topics"
)

// hook authenticates clients, enforces their ACLs and limits, and hands
// messages to the sink.
type hook struct {
	mochi.HookBase
	l *Listener
}

func (h *hook) ID() string { return "gobridge-listener" }

func (h *hook) Provides(b byte) bool {
	return bytes.Contains([]byte{mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPacketRead, mochi.OnPublish,
		mochi.OnDisconnect, mochi.OnWill, mochi.OnPacketEncode, mochi.OnSessionEstablished, mochi.OnClientExpired,
		mochi.OnSubscribe, mochi.OnSubscribed}, []byte{b})
}

// OnConnectAuthenticate admits a client by its identity (see access) and
// records the identity as the client's username, for its ACL. A will on a
// topic outside the client's publish ACL (or that is no valid topic name to
// publish to: empty, a wildcard, $SYS) refuses the connection, and so
// does a client ID whose session (connected or not) belongs to another
// identity.
func (h *hook) OnConnectAuthenticate(cl *mochi.Client, pk packets.Packet) bool {
	var identity, why string
	var ok bool
	for {
		a := h.l.access.Load()
		identity, ok = a.authenticate(string(pk.Connect.Username), pk.Connect.Password, certName(cl))
		why = "bad credentials"
		if w := pk.Connect.WillTopic; ok && pk.Connect.WillFlag && (w == "" || !mochi.IsValidFilter(w, true) || !a.acl(identity).mayPublish(w)) {
			ok, why = false, "will topic not allowed"
		}
		// SetUsers swaps the users under mu and then checks the claims: a
		// client admitted under the old users is among them, or is
		// authenticated again here.
		h.l.mu.Lock()
		if h.l.access.Load() == a {
			break
		}
		h.l.mu.Unlock()
	}
	// mochi hands a session (its subscriptions and the messages queued for
	// it) to whoever connects with its client ID: another identity would
	// read what its own ACL refuses, and kick the owner off. Check and
	// claim are one step: until mochi registers the session, the claim
	// stands for it.
	existing, held := h.l.srv.Clients.Get(cl.ID)
	if c := h.l.claims[cl.ID]; c != nil && !c.Closed() {
		existing, held = c, true
	}
	if ok && held && string(existing.Properties.Username) != identity {
		ok, why = false, "client id held by another user's session"
	}
	if ok {
		if tc, is := cl.Net.Conn.(*trackedConn); is {
			tc.admitted()
		}
		cl.Properties.Username = []byte(identity)
		h.l.claims[cl.ID] = cl
		if !held {
			h.l.dropOldestSession(identity)
		}
	}
	h.l.mu.Unlock()
	if !ok {
		if n := h.l.refused.Add(1); n&(n-1) == 0 {
			h.l.log.Warn("connection refused", "why", why, "remote", cl.Net.Remote, "username", string(pk.Connect.Username), "count", n)
		}
	}
	return ok
}

// certName is the common name of the client's verified certificate, or "".
func certName(cl *mochi.Client) string {
	conn := cl.Net.Conn
	if tc, ok := conn.(*trackedConn); ok {
		conn = tc.Conn
	}
	if c, ok := conn.(*tls.Conn); ok {
		if certs := c.ConnectionState().VerifiedChains; len(certs) > 0 {
			return certs[0][0].Subject.CommonName
		}
	}
	return ""
}

// OnACLCheck allows a subscription (and a delivery to it) covered by the
// client's subscribe ACL; a refused subscription gets SUBACK 0x80 (MQTT 5:
// 0x87). Publications are checked in OnPublish, which acknowledges a
// denied one: mochi would disconnect an MQTT 3.1.1 publisher instead.
func (h *hook) OnACLCheck(cl *mochi.Client, topic string, write bool) bool {
	return write || h.l.access.Load().acl(string(cl.Properties.Username)).maySubscribe(topic)
}

// OnWill strips the retain flag of a will unless retained messages are kept.
func (h *hook) OnWill(_ *mochi.Client, w mochi.Will) (mochi.Will, error) {
	w.Retain = w.Retain && h.l.o.Retain
	return w, nil
}

// OnPacketEncode tells MQTT 5 clients the hard packet limit in the CONNACK.
func (h *hook) OnPacketEncode(_ *mochi.Client, pk packets.Packet) packets.Packet {
	if pk.FixedHeader.Type == packets.Connack {
		pk.Properties.MaximumPacketSize = uint32(h.l.o.MaxPayloadBytes + PacketOverhead)
	}
	return pk
}

// OnPacketRead denies a PUBLISH to a topic mochi drops unanswered before
// OnPublish ($SYS/..., a bare $share/GROUP), which would hold a QoS 1/2
// publisher's in-flight slot forever: OnPublish acknowledges it as denied,
// then mochi gets it as QoS 0 and drops it. (A topic with a wildcard is a
// protocol error that closes the connection.) It also caps the session
// expiry an MQTT 5 DISCONNECT sets: mochi caps it in the CONNECT only, so a
// DISCONNECT asking for 0xFFFFFFFF kept the session for good. And it
// answers a resent QoS 2 message (DUP) that was taken and awaits its PUBREL
// with a plain PUBREC, then lets mochi drop it: mochi answered MQTT 5
// publishers PUBREC 0x91 (packet identifier in use), a failure for a
// message gobridge had taken.
func (h *hook) OnPacketRead(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Disconnect {
		pk.Properties.SessionExpiryInterval = min(pk.Properties.SessionExpiryInterval, uint32(h.l.o.SessionExpiry/time.Second))
	}
	if pk.FixedHeader.Type == packets.Publish && pk.FixedHeader.Qos == 2 && pk.FixedHeader.Dup && !cl.Net.Inline {
		if in, ok := cl.State.Inflight.Get(pk.PacketID); ok && in.FixedHeader.Type == packets.Pubrec {
			_ = cl.WritePacket(packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID})
			pk.TopicName, pk.FixedHeader.Qos, pk.PacketID = mochi.SysPrefix, 0, 0 // not a topic to publish to: dropped
			return pk, nil
		}
	}
	if pk.FixedHeader.Type == packets.Publish && !cl.Net.Inline && !mochi.IsValidFilter(pk.TopicName, true) &&
		!strings.ContainsAny(pk.TopicName, "+#") {
		_, _ = h.OnPublish(cl, pk)
		pk.FixedHeader.Qos, pk.PacketID = 0, 0
	}
	return pk, nil
}

// OnPublish runs in the publisher's read loop, before mochi would write the
// PUBACK/PUBREC (see the package documentation for the flow). It waits
// while the connection's acker or the receiver's byte window is full, and
// while the sink pushes back.
func (h *hook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	l := h.l
	if cl.Net.Inline {
		return pk, nil // the broker's own publications are not ingested again
	}
	a := l.acker(cl)
	pk.FixedHeader.Retain = pk.FixedHeader.Retain && l.o.Retain
	qos := pk.FixedHeader.Qos
	m := receivers.Message{
		Receiver: l.o.ID, Topic: pk.TopicName, Payload: pk.Payload, QoS: qos,
		Retained: pk.FixedHeader.Retain, Duplicate: pk.FixedHeader.Dup, ReceivedAt: time.Now(),
	}
	reason := packets.CodeSuccess
	toSink := topics.MatchAny(l.o.Topics, pk.TopicName)
	switch {
	case !mochi.IsValidFilter(pk.TopicName, true) || !l.access.Load().acl(string(cl.Properties.Username)).mayPublish(pk.TopicName):
		l.win.Denied.Add(1)
		reason, toSink, m.Payload = packets.ErrNotAuthorized, false, nil
	case m.Limit(l.o.MaxPayloadBytes):
		l.win.TooLarge.Add(1)
		reason = packets.ErrPacketTooLarge
		if !toSink {
			m.Payload = nil // discarded, not routed to subscribers either
		}
	case !toSink:
		l.win.Unrouted.Add(1)
	}

	// The acknowledgement keeps what it needs, not the packet: the payload
	// of an oversized or denied message is not held until its turn.
	released := make(chan struct{})
	id, topic, retain, onward := pk.PacketID, pk.TopicName, pk.FixedHeader.Retain, m.Payload
	ack := func() {
		if qos == 2 {
			close(released) // the read loop answers
			return
		}
		if qos == 1 {
			puback := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id, ReasonCode: reason.Code}
			if err := cl.WritePacket(puback); err != nil {
				l.log.Debug("puback not written; the publisher sends the message again", "client", cl.ID, "error", err)
			}
		}
		if reason == packets.CodeSuccess {
			if err := l.srv.Publish(topic, onward, retain, qos); err != nil {
				l.log.Warn("route to embedded subscribers", "topic", topic, "error", err)
			}
		}
	}
	// The topic is held until the acknowledgement too (by the sink and for
	// the re-publication): it counts against the window with the payload,
	// or 64 KiB topics with empty payloads would hold memory unbounded by
	// max_inflight_bytes.
	done := a.Add(a.ctx, len(topic)+len(m.Payload), true, ack)
	if done == nil { // stopping
		cl.Stop(errShutdown)
		return pk, packets.ErrRejectPacket
	}
	if toSink {
		l.win.Received.Add(1)
		l.sink.Accept(a.ctx, m, done) // ends with the connection: its ack could not be written
	} else {
		done()
	}
	if qos < 2 {
		return pk, packets.ErrRejectPacket // the acker acknowledges and routes
	}
	select {
	case <-released:
	case <-a.ctx.Done():
		select {
		case <-released: // released just in time
		default:
			l.log.Debug("stopping: message not settled, publisher disconnected without acknowledgement",
				"client", cl.ID, "topic", pk.TopicName)
			cl.Stop(errShutdown)
			return pk, packets.ErrRejectPacket
		}
	}
	if reason == packets.CodeSuccess {
		return pk, nil // mochi writes the PUBREC and routes the message
	}
	// MQTT 5: a failing PUBREC ends the exchange. MQTT 3.1.1 (no reason
	// code): the PUBREL that follows gets its PUBCOMP from mochi.
	pubrec := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrec}, PacketID: pk.PacketID, ReasonCode: reason.Code}
	if err := cl.WritePacket(pubrec); err != nil {
		l.log.Debug("pubrec not written; the publisher sends the message again", "client", cl.ID, "error", err)
	}
	return pk, packets.ErrRejectPacket
}

// OnDisconnect ends the connection's acker: what it still holds is
// abandoned, and the publisher sends it again.
func (h *hook) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	h.l.mu.Lock()
	a := h.l.ackers[cl]
	delete(h.l.ackers, cl)
	h.l.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}
