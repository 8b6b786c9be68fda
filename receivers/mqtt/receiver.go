// Package mqtt is the receiver that subscribes to an existing MQTT broker
// (Mosquitto, EMQX, HiveMQ, ...) with the paho v3.1.1 client.
//
// Messages are acknowledged manually: paho's handler only appends each
// message to the receiver's own bounded, ordered ingest queue and returns
// (it must not block: while it does, paho stops reading the socket). A
// dispatcher hands the messages to the sink in arrival order and an acker
// sends PUBACK/PUBREC in arrival order, each only after the sink called done
// for it and for every message before it (MQTT 3.1.1 §4.6).
package mqtt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/routes"
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

// Receiver subscribes to a broker and hands each message to a sink. Create
// it with New; it is safe for concurrent use.
type Receiver struct {
	id   string
	opts *paho.ClientOptions
	subs []subscription
	log  *slog.Logger
	pipe *pipeline

	ran        atomic.Bool
	reconnects atomic.Uint64
	connects   atomic.Uint64

	mu     sync.Mutex
	status receivers.Status
	broker string // the broker of the current or last connection attempt
	// subscribing is closed when the onConnect in progress (if any) has
	// finished; nil before the first connection.
	subscribing chan struct{}
}

// New validates cfg and builds a receiver that hands messages to sink. It
// does not connect: Run does. bridgeID names the default client id
// ("gobridge-" + bridgeID). Defaults: keep_alive 30s, connect_timeout 10s,
// QoS 1. Errors wrap ErrConfig, or are TLS file errors. A nil logger
// discards.
func New(cfg routes.ReceiverConfig, bridgeID string, sink receivers.Sink, logger *slog.Logger) (*Receiver, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: nil sink", ErrConfig)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	subs, err := subscriptions(cfg)
	if err != nil {
		return nil, err
	}
	opts, err := clientOptions(cfg, bridgeID)
	if err != nil {
		return nil, fmt.Errorf("receiver %q: %w", cfg.ID, err)
	}
	r := &Receiver{
		id:     cfg.ID,
		opts:   opts,
		subs:   subs,
		log:    logger.With("component", "receiver", "receiver", cfg.ID),
		pipe:   newPipeline(sink, DefaultMaxInFlight),
		status: receivers.Status{Reason: "not connected yet"},
	}
	opts.SetDefaultPublishHandler(r.handle)
	opts.SetOnConnectHandler(r.onConnect)
	opts.SetConnectionNotificationHandler(r.onNotification)
	return r, nil
}

// Run connects, subscribes and hands messages to the sink until ctx is
// done. Connection failures are retried with backoff (1s doubling to 30s)
// and reported by Status, never returned. When ctx is done Run stops
// handing messages over, keeps acknowledging those the sink settles for up
// to ShutdownGrace, disconnects cleanly and returns nil. Every goroutine it
// starts has stopped when it returns. Run may be called once.
func (r *Receiver) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRun
	}
	client := paho.NewClient(r.opts)

	var wg sync.WaitGroup
	quitAck := make(chan struct{})
	wg.Go(func() { r.pipe.dispatch(ctx) })
	wg.Go(func() { r.pipe.ackLoop(quitAck) })

	r.log.Info("connecting", "brokers", r.opts.Servers)
	client.Connect() // with ConnectRetry the token completes only on success
	<-ctx.Done()

	r.pipe.stop()
	r.pipe.drain(ShutdownGrace)
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
	// next session; TestReceiver_RedeliversUnackedAfterRestart under load).
	r.mu.Lock()
	subscribing := r.subscribing
	r.mu.Unlock()
	if subscribing != nil && quiesce > 0 {
		wait := time.NewTimer(disconnectQuiesce)
		select {
		case <-subscribing:
		case <-wait.C:
		}
		wait.Stop()
	}
	client.Disconnect(quiesce)
	close(quitAck)
	wg.Wait()
	if n := r.pipe.inFlight(); n > 0 {
		r.pipe.abandoned.Add(uint64(n))
		r.log.Info("stopped with unacknowledged messages; the broker redelivers them", "count", n)
	}
	r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: "stopped"} })
	r.log.Info("stopped")
	return nil
}

// Status reports whether the receiver is connected and fully subscribed,
// and why not.
func (r *Receiver) Status() receivers.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Stats returns the receiver's counters. Acked counts acknowledgements
// handed to paho; one for a message of a connection that has since dropped
// is discarded by paho and the broker redelivers the message.
func (r *Receiver) Stats() receivers.Stats {
	return receivers.Stats{
		Received:   r.pipe.received.Load(),
		Acked:      r.pipe.acked.Load(),
		Dropped:    r.pipe.dropped.Load(),
		Abandoned:  r.pipe.abandoned.Load(),
		Reconnects: r.reconnects.Load(),
		InFlight:   r.pipe.inFlight(),
	}
}

// handle runs in paho's router goroutine, one message at a time in arrival
// order. It only queues the message; it blocks only when gobridge's own
// in-flight cap is reached for a QoS 1/2 message.
func (r *Receiver) handle(_ paho.Client, m paho.Message) {
	it := &item{
		msg: receivers.Message{
			Receiver:   r.id,
			Topic:      m.Topic(),
			Payload:    m.Payload(),
			QoS:        m.Qos(),
			Retained:   m.Retained(),
			Duplicate:  m.Duplicate(),
			ReceivedAt: time.Now(),
		},
		ack:  m.Ack,
		done: make(chan struct{}),
	}
	if !r.pipe.offer(it) && it.msg.QoS == 0 {
		r.log.Debug("dropped qos 0 message: ingest queue full")
	}
}

// onConnect runs (in its own goroutine) after every successful connection
// and subscribes: a broker without a persistent session, or one that was
// restarted without persistence, has forgotten the subscriptions.
func (r *Receiver) onConnect(c paho.Client) {
	done := make(chan struct{})
	defer close(done)
	r.mu.Lock()
	r.subscribing = done
	r.mu.Unlock()
	if r.connects.Add(1) > 1 {
		r.reconnects.Add(1)
	}
	r.setStatus(func(s *receivers.Status) {
		*s = receivers.Status{Connected: true, Reason: "subscribing"}
	})
	r.log.Info("connected", "broker", r.currentBroker())
	for _, sub := range r.subs {
		tok := c.Subscribe(sub.filter, sub.qos, nil)
		if !tok.WaitTimeout(subscribeTimeout) {
			r.subscribeFailed(sub, "no SUBACK within "+subscribeTimeout.String())
			return
		}
		if err := tok.Error(); err != nil {
			r.subscribeFailed(sub, err.Error())
			return
		}
		for _, granted := range tok.(*paho.SubscribeToken).Result() {
			if granted == 0x80 {
				r.subscribeFailed(sub, "refused by the broker")
				return
			}
			if granted < sub.qos {
				r.log.Warn("broker granted a lower qos", "topic", sub.filter, "requested", sub.qos, "granted", granted)
			}
		}
	}
	if !c.IsConnectionOpen() {
		return // lost again while subscribing: the notification set the reason
	}
	r.setStatus(func(s *receivers.Status) {
		if s.Connected {
			*s = receivers.Status{Connected: true, Subscribed: true}
		}
	})
	r.log.Info("subscribed", "topics", len(r.subs))
}

func (r *Receiver) subscribeFailed(sub subscription, why string) {
	reason := fmt.Sprintf("subscription to %s %s", sub.filter, why)
	r.log.Error("subscribe failed", "topic", sub.filter, "error", why)
	r.setStatus(func(s *receivers.Status) {
		s.Subscribed = false
		s.Reason = reason
	})
}

// onNotification tracks connection attempts and losses for Status.
func (r *Receiver) onNotification(c paho.Client, n paho.ConnectionNotification) {
	switch n := n.(type) {
	case paho.ConnectionNotificationBroker:
		r.mu.Lock()
		r.broker = n.Broker.String()
		r.mu.Unlock()
	case paho.ConnectionNotificationBrokerFailed:
		reason := fmt.Sprintf("connect to %s: %v", n.Broker, n.Reason)
		r.log.Warn("connect failed", "broker", n.Broker.String(), "error", n.Reason)
		r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: reason} })
	case paho.ConnectionNotificationLost:
		if c.IsConnectionOpen() {
			return // a late notification: already connected again
		}
		reason := fmt.Sprintf("disconnected from %s: %v", r.currentBroker(), n.Reason)
		r.log.Warn("connection lost", "broker", r.currentBroker(), "error", n.Reason)
		r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: reason} })
	}
}

func (r *Receiver) currentBroker() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broker
}

func (r *Receiver) setStatus(f func(*receivers.Status)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.status)
}
