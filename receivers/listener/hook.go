package listener

import (
	"bytes"
	"crypto/subtle"
	"sync"
	"time"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers"
)

// hook authenticates publishers and hands their messages to the sink.
type hook struct {
	mochi.HookBase
	l *Listener
}

func (h *hook) ID() string { return "gobridge-listener" }

func (h *hook) Provides(b byte) bool {
	return bytes.Contains([]byte{mochi.OnConnectAuthenticate, mochi.OnACLCheck, mochi.OnPublish, mochi.OnDisconnect}, []byte{b})
}

// OnConnectAuthenticate allows everyone when no users are configured, and
// otherwise only a known username with its password.
func (h *hook) OnConnectAuthenticate(_ *mochi.Client, pk packets.Packet) bool {
	if h.l.users == nil {
		return true
	}
	want, ok := h.l.users[string(pk.Connect.Username)]
	if !ok {
		subtle.ConstantTimeCompare(pk.Connect.Password, pk.Connect.Password) // same work either way
		return false
	}
	return subtle.ConstantTimeCompare([]byte(want), pk.Connect.Password) == 1
}

// OnACLCheck lets every authenticated client publish and subscribe.
func (h *hook) OnACLCheck(*mochi.Client, string, bool) bool { return true }

// OnPublish runs in the publisher's read loop, before mochi would write
// the PUBACK/PUBREC.
//
// QoS 0 and 1: it queues the message on the connection's pubAcker (waiting
// while PublisherWindow messages are unsettled), hands it to the sink and
// rejects the packet, so mochi writes no PUBACK and routes nothing; the
// pubAcker writes the PUBACK after done, in arrival order, and routes the
// message to the embedded broker's subscribers. The read loop moves on to
// the next message at once, so one publisher can have many messages in
// flight.
//
// QoS 2: it waits for done and returns, and mochi then writes the PUBREC
// and runs the PUBREL/PUBCOMP exchange; one QoS 2 message per publisher is
// in flight at a time.
//
// If Run's ctx ends first, the publisher's connection is dropped and the
// packet rejected, so no acknowledgement is sent for an unsettled message.
func (h *hook) OnPublish(cl *mochi.Client, pk packets.Packet) (packets.Packet, error) {
	l := h.l
	if cl.Net.Inline {
		return pk, nil // the broker's own publications are not ingested again
	}
	if !l.matches(pk.TopicName) {
		l.unrouted.Add(1)
		return pk, nil
	}
	if !l.enter() {
		cl.Stop(errShutdown)
		return pk, packets.ErrRejectPacket
	}
	defer l.hooks.Done()

	ctx := l.ctx
	m := receivers.Message{
		Receiver:   l.id,
		Topic:      pk.TopicName,
		Payload:    pk.Payload,
		QoS:        pk.FixedHeader.Qos,
		Retained:   pk.FixedHeader.Retain,
		Duplicate:  pk.FixedHeader.Dup,
		ReceivedAt: time.Now(),
	}
	done := make(chan struct{})
	var once sync.Once
	// done may be called from any goroutine, exactly once; a second call is
	// ignored rather than a panic on a closed channel.
	settle := func() { once.Do(func() { close(done) }) }

	if pk.FixedHeader.Qos < 2 {
		a := l.acker(cl)
		if a == nil || ctx.Err() != nil {
			cl.Stop(errShutdown)
			return pk, packets.ErrRejectPacket
		}
		l.inFlight.Add(1) // before the acker can see it, so it never goes negative
		select {
		case a.queue <- &pendingPub{pk: pk, done: done}:
		case <-ctx.Done():
			l.inFlight.Add(-1)
			cl.Stop(errShutdown)
			return pk, packets.ErrRejectPacket
		}
		l.received.Add(1)
		l.sink.Accept(ctx, m, settle)
		return pk, packets.ErrRejectPacket // the pubAcker acknowledges and routes
	}

	l.received.Add(1)
	l.inFlight.Add(1)
	defer l.inFlight.Add(-1)
	l.sink.Accept(ctx, m, settle)
	select {
	case <-done:
		l.acked.Add(1)
		return pk, nil
	case <-ctx.Done():
		select {
		case <-done: // settled just in time
			l.acked.Add(1)
			return pk, nil
		default:
		}
		l.abandoned.Add(1)
		l.log.Debug("stopping: message not settled, publisher disconnected without acknowledgement",
			"client", cl.ID, "topic", pk.TopicName)
		cl.Stop(errShutdown)
		return pk, packets.ErrRejectPacket
	}
}

// OnDisconnect ends the connection's pubAcker.
func (h *hook) OnDisconnect(cl *mochi.Client, _ error, _ bool) {
	h.l.mu.Lock()
	a := h.l.ackers[cl]
	delete(h.l.ackers, cl)
	h.l.mu.Unlock()
	if a != nil {
		a.close()
	}
}
