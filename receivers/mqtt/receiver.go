// Package mqtt is the receiver that subscribes to an existing MQTT broker
// (Mosquitto, EMQX, HiveMQ, ...) with the paho v3.1.1 client.
//
// paho's handler only queues each message on the receiver's receivers.Acker
// (bounded in messages and bytes) and dispatch queue, and returns: while it
// blocks, paho stops reading the socket. A dispatcher hands the messages to
// the sink in arrival order, and the acker acknowledges them in that order.
package mqtt

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
)

// ShutdownGrace is how long Run, once its ctx is done, keeps acknowledging
// messages that the sink settles, before it disconnects. Messages settled
// later are not acknowledged and the broker redelivers them (persistent
// session): a duplicate, never a loss.
const ShutdownGrace = 2 * time.Second

// disconnectQuiesce bounds how long a clean disconnect waits for queued
// packets (acknowledgements) to be written.
const disconnectQuiesce = 2 * time.Second

// subscribeTimeout bounds the wait for a SUBACK.
const subscribeTimeout = 30 * time.Second

// ErrAlreadyRun is returned by a second call to Run.
var ErrAlreadyRun = errors.New("mqtt receiver: Run called twice")

// ErrNoSession is returned by Run in Adopt mode when the broker had no
// session for the client ID: there is nothing to take over.
var ErrNoSession = errors.New("mqtt receiver: the broker has no session for this client id")

// ErrConnectionLost is returned by Run in Adopt mode when the connection
// dropped.
var ErrConnectionLost = errors.New("mqtt receiver: connection lost")

// Receiver subscribes to a broker and hands each message to a sink. Create
// it with New; it is safe for concurrent use.
type Receiver struct {
	o       Options
	brokers []string // redacted, for logs
	opts    *paho.ClientOptions
	sink    receivers.Sink
	log     *slog.Logger

	win        *receivers.Window
	acker      *receivers.Acker
	toDispatch chan delivery // capacity MaxInFlight: the acker holds a slot for each
	ctx        context.Context

	lost     chan struct{} // closed when an Adopt connection drops
	lostOnce sync.Once
	ran      atomic.Bool
	connects atomic.Uint64
	failures atomic.Uint64 // failed connection attempts since the last success
	// handed and acked count this receiver's messages (the window's
	// counters may be shared with other receivers), for drain.
	handed, acked atomic.Uint64

	mu     sync.Mutex
	status receivers.Status
	broker string      // the broker (redacted) of the current or last connection attempt
	client paho.Client // set by Run
	// subscribing is closed when the onConnect in progress (if any) has
	// finished; nil before the first connection.
	subscribing chan struct{}
}

type delivery struct {
	m    receivers.Message
	done func()
}

// New validates o and builds a receiver that hands messages to sink. It
// does not connect: Run does. Errors wrap ErrConfig. A nil logger discards.
func New(o Options, sink receivers.Sink, logger *slog.Logger) (*Receiver, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrConfig)
	}
	o, brokers, err := o.validate()
	if err != nil {
		return nil, err
	}
	win := o.Window
	if win == nil {
		win = receivers.NewWindow(o.MaxInflightBytes)
	}
	r := &Receiver{
		o:          o,
		brokers:    brokers,
		opts:       o.clientOptions(),
		sink:       sink,
		log:        cmp.Or(logger, slog.New(slog.DiscardHandler)).With("component", "receiver", "receiver", o.ID),
		win:        win,
		acker:      win.NewAcker(MaxInFlight),
		toDispatch: make(chan delivery, MaxInFlight),
		lost:       make(chan struct{}),
		status:     receivers.Status{Reason: "not connected yet"},
	}
	r.opts.SetDefaultPublishHandler(r.handle)
	r.opts.SetOnConnectHandler(r.onConnect)
	r.opts.SetConnectionNotificationHandler(r.onNotification)
	return r, nil
}

// Run connects, subscribes and hands messages to the sink until ctx is
// done. Connection failures are retried with backoff (every second at
// first, then 1s doubling to 30s after a loss) and reported by Status,
// never returned. When ctx is done Run stops handing messages over, keeps
// acknowledging those the sink settles for up to ShutdownGrace, disconnects
// cleanly and returns nil. Every goroutine it starts has stopped when it
// returns. Run may be called once.
func (r *Receiver) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	r.ctx = ctx
	client := paho.NewClient(r.opts)
	r.mu.Lock()
	r.client = client
	r.mu.Unlock()

	var wg sync.WaitGroup
	ackCtx, stopAck := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAck()
	wg.Go(func() { r.dispatch(ctx) })
	wg.Go(func() { r.acker.Run(ackCtx) })

	r.log.Info("connecting", "brokers", r.brokers)
	tok := client.Connect() // with ConnectRetry the token completes only on success
	var err error
	if r.o.Adopt {
		err = r.adopted(ctx, tok)
		stop() // also when the adoption ended by itself
	} else {
		<-ctx.Done()
	}

	r.drain(ShutdownGrace)
	// paho writes the acknowledgements already handed to it before the
	// DISCONNECT, and waits up to quiesce for that; then it closes the
	// connection anyway (acks not yet written are lost: duplicates later).
	quiesce := uint(disconnectQuiesce / time.Millisecond)
	if !client.IsConnectionOpen() {
		quiesce = 0 // nothing to flush; do not wait for a connection attempt
	}
	// A SUBSCRIBE still in flight is let finish first (bounded by the
	// same quiesce): disconnecting before its SUBACK lost an acknowledgement
	// written just before (Mosquitto 2.0 redelivered the message to the
	// next session).
	r.mu.Lock()
	subscribing := r.subscribing
	r.mu.Unlock()
	if subscribing != nil && quiesce > 0 {
		select {
		case <-subscribing:
		case <-time.After(disconnectQuiesce):
		}
	}
	client.Disconnect(quiesce)
	before := r.win.Stats().Abandoned
	stopAck()
	wg.Wait()
	if n := r.win.Stats().Abandoned - before; n > 0 {
		r.log.Info("stopped with unacknowledged messages; the broker redelivers them", "count", n)
	}
	r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: "stopped"} })
	r.log.Info("stopped")
	return err
}

// adopted waits, in Adopt mode, until ctx is done, the broker turns out to
// have no session for the client id, or the connection drops.
func (r *Receiver) adopted(ctx context.Context, tok paho.Token) error {
	select {
	case <-tok.Done():
	case <-ctx.Done():
		return nil
	}
	if !tok.(*paho.ConnectToken).SessionPresent() {
		return ErrNoSession
	}
	select {
	case <-ctx.Done():
		return nil
	case <-r.lost:
		return ErrConnectionLost
	}
}

// Status reports whether the receiver is connected and fully subscribed,
// and why not.
func (r *Receiver) Status() receivers.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	// paho reports a lost connection only once its router is free; while
	// handle waits for room (ingest pushes back) that can take long.
	if r.status.Connected && !r.client.IsConnectionOpen() {
		return receivers.Status{Reason: fmt.Sprintf("disconnected from %s (reconnects once ingest takes messages again)", r.broker)}
	}
	return r.status
}

// Stats returns the receiver's counters. Acked counts acknowledgements
// handed to paho; one for a message of a connection that has since dropped
// is discarded by paho and the broker redelivers the message.
func (r *Receiver) Stats() receivers.Stats { return r.win.Stats() }

// handle runs in paho's router goroutine, one message at a time in arrival
// order. It only queues the message; it blocks only while the receiver's
// in-flight bounds are reached for a QoS 1/2 message (a QoS 0 message is
// dropped then).
func (r *Receiver) handle(_ paho.Client, pm paho.Message) {
	m := receivers.Message{
		Receiver:   r.o.ID,
		Topic:      pm.Topic(),
		Payload:    pm.Payload(),
		QoS:        pm.Qos(),
		Retained:   pm.Retained(),
		Duplicate:  pm.Duplicate(),
		ReceivedAt: time.Now(),
	}
	if m.Limit(r.o.MaxPayloadBytes) {
		r.win.TooLarge.Add(1)
	}
	// The whole payload counts, truncated or not, and so does the topic
	// (up to 64 KiB): paho's Ack holds the packet until the
	// acknowledgement.
	ack := func() { pm.Ack(); r.acked.Add(1) }
	if done := r.acker.Add(r.ctx, m.Size+len(m.Topic), m.QoS > 0, ack); done != nil {
		r.toDispatch <- delivery{m: m, done: done}
	}
}

// dispatch hands queued messages to the sink in order until ctx is done.
// Messages still queued then are never handed over (nor acknowledged).
func (r *Receiver) dispatch(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case d := <-r.toDispatch:
			if ctx.Err() != nil {
				return
			}
			r.win.Received.Add(1)
			r.handed.Add(1)
			r.sink.Accept(ctx, d.m, d.done)
		}
	}
}

// drain waits, up to grace, until every message handed to the sink is
// acknowledged.
func (r *Receiver) drain(grace time.Duration) {
	deadline := time.After(grace)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for r.acked.Load() < r.handed.Load() {
		select {
		case <-deadline:
			return
		case <-tick.C:
		}
	}
}

func (r *Receiver) setStatus(f func(*receivers.Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.status)
}
