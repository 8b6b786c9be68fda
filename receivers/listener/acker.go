package listener

import (
	"context"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// PublisherWindow is how many QoS 0/1 messages of one publisher connection
// may be handed to the sink and not yet settled. When it is full, mochi's
// read loop for that publisher waits: TCP flow control holds the publisher
// back.
const PublisherWindow = 1024

// pendingPub is a QoS 0/1 message handed to the sink, waiting for done.
type pendingPub struct {
	pk   packets.Packet
	done chan struct{}
}

// pubAcker acknowledges one publisher connection's QoS 0/1 messages in the
// order they arrived, each after its done: it writes the PUBACK itself
// (mochi was told to reject the packet, so it writes none) and then
// re-publishes the message to the embedded broker's subscribers through
// the inline client (which the hook ignores, so nothing is ingested twice).
type pubAcker struct {
	l     *Listener
	srv   *mochi.Server
	cl    *mochi.Client
	queue chan *pendingPub
	gone  chan struct{} // closed when the connection ends
	once  sync.Once
}

func (a *pubAcker) close() { a.once.Do(func() { close(a.gone) }) }

// run acknowledges until the connection ends or ctx is done; messages not
// settled by then are abandoned: no PUBACK, the publisher sends them again.
func (a *pubAcker) run(ctx context.Context) {
	defer a.l.hooks.Done()
	for {
		var p *pendingPub
		select {
		case p = <-a.queue:
		case <-a.gone:
			a.abandon(0)
			return
		case <-ctx.Done():
			a.abandon(0)
			return
		}
		select {
		case <-p.done:
		case <-a.gone:
			a.abandon(1)
			return
		case <-ctx.Done():
			select {
			case <-p.done: // settled just in time
			default:
				a.abandon(1)
				a.cl.Stop(errShutdown)
				return
			}
		}
		if p.pk.FixedHeader.Qos == 1 {
			ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.pk.PacketID}
			if err := a.cl.WritePacket(ack); err != nil {
				a.l.log.Debug("puback not written; the publisher sends the message again", "client", a.cl.ID, "error", err)
			}
		}
		a.l.acked.Add(1)
		a.l.inFlight.Add(-1)
		if err := a.srv.Publish(p.pk.TopicName, p.pk.Payload, p.pk.FixedHeader.Retain, p.pk.FixedHeader.Qos); err != nil {
			a.l.log.Warn("route to embedded subscribers", "topic", p.pk.TopicName, "error", err)
		}
	}
}

// abandon counts the messages still held, plus held already taken off the
// queue.
func (a *pubAcker) abandon(held int) {
	n := held + len(a.queue)
	a.l.abandoned.Add(uint64(n))
	a.l.inFlight.Add(-int64(n))
}
