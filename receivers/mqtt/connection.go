package mqtt

import (
	"cmp"
	"fmt"
	"strings"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
)

// onConnect runs (in its own goroutine) after every successful connection
// and subscribes: a broker without a persistent session, or one that was
// restarted without persistence, has forgotten the subscriptions. The
// receiver is ready only when every subscription was granted with the QoS
// it needs: a QoS 1/2 subscription granted QoS 0 may lose messages, so it
// counts as refused; a QoS 2 subscription granted QoS 1 is only logged.
func (r *Receiver) onConnect(c paho.Client) {
	if r.connects.Add(1) > 1 {
		r.win.Reconnects.Add(1)
	}
	r.failures.Store(0)
	done := make(chan struct{})
	defer close(done)
	r.mu.Lock()
	r.subscribing, r.status = done, receivers.Status{Connected: true, Reason: "subscribing"}
	r.mu.Unlock()
	r.log.Info("connected", "broker", r.currentBroker())
	topics := r.o.Topics
	if r.o.Adopt {
		topics = nil // the adopted session holds its subscriptions
	}
	// One SUBSCRIBE for every filter: a filter the broker refuses does not
	// keep the others from being made.
	filters, names := make(map[string]byte, len(topics)), make([]string, len(topics))
	for i, sub := range topics {
		filters[sub.Filter], names[i] = sub.QoS, sub.Filter
	}
	var failed string // the reason of the first subscription that failed
	if len(filters) > 0 {
		tok := c.SubscribeMultiple(filters, nil)
		if !tok.WaitTimeout(subscribeTimeout) {
			// Typically ingest pushing back: paho's router is held by a
			// message the sink has not taken, and the SUBACK waits behind
			// it. Say so, and keep waiting: the token ends with the SUBACK
			// or with the connection.
			why := fmt.Sprintf("got no SUBACK within %s (still waiting; a full outbox holds messages ahead of it)", subscribeTimeout)
			r.log.Warn("subscribe waiting", "topic", strings.Join(names, ", "), "error", why)
			r.setStatus(func(s *receivers.Status) {
				s.Subscribed, s.Reason = false, "subscription to "+strings.Join(names, ", ")+" "+why
			})
			<-tok.Done()
		}
		switch {
		case tok.Error() != nil:
			failed = r.subscribeFailed(strings.Join(names, ", "), tok.Error().Error())
		default:
			failed = r.checkGrants(topics, tok.(*paho.SubscribeToken).Result())
		}
	}
	if failed != "" {
		r.setStatus(func(s *receivers.Status) { s.Subscribed, s.Reason = false, failed })
		return
	}
	if !c.IsConnectionOpen() {
		return // lost again while subscribing: the notification set the reason
	}
	r.setStatus(func(s *receivers.Status) {
		if s.Connected {
			*s = receivers.Status{Connected: true, Subscribed: true}
		}
	})
	r.log.Info("subscribed", "topics", len(topics))
}

// checkGrants logs each subscription the broker refused or granted a
// lower QoS, and returns the reason of the first that fails.
func (r *Receiver) checkGrants(topics []Subscription, grants map[string]byte) (failed string) {
	for _, sub := range topics {
		why := ""
		switch granted, ok := grants[sub.Filter]; {
		case !ok || granted == 0x80:
			why = "was refused by the broker"
		case granted == 0 && sub.QoS > 0:
			why = fmt.Sprintf("was granted QoS 0 (asked for %d): the broker may drop its messages", sub.QoS)
		case granted < sub.QoS:
			r.log.Info("broker granted a lower qos", "topic", sub.Filter, "requested", sub.QoS, "granted", granted)
		}
		if why != "" {
			failed = cmp.Or(failed, r.subscribeFailed(sub.Filter, why))
		}
	}
	return failed
}

// subscribeFailed logs why the subscription to filter failed and returns
// the reason Status gives.
func (r *Receiver) subscribeFailed(filter, why string) string {
	r.log.Error("subscribe failed", "topic", filter, "error", why)
	return fmt.Sprintf("subscription to %s %s", filter, why)
}

// onNotification tracks connection attempts and losses for Status. A
// failed attempt is logged the first time and then at attempts 2, 4, 8, ...
// (paho retries every second while it never connected), with the count.
func (r *Receiver) onNotification(c paho.Client, n paho.ConnectionNotification) {
	switch n := n.(type) {
	case paho.ConnectionNotificationBroker:
		r.mu.Lock()
		r.broker = n.Broker.Redacted()
		r.mu.Unlock()
	case paho.ConnectionNotificationFailed:
		attempt := r.failures.Add(1)
		broker := r.currentBroker()
		reason := fmt.Sprintf("connect to %s (attempt %d): %v", broker, attempt, n.Reason)
		if attempt&(attempt-1) == 0 {
			r.log.Warn("connect failed; retrying", "broker", broker, "attempt", attempt, "error", n.Reason)
		}
		r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: reason} })
	case paho.ConnectionNotificationLost:
		if c.IsConnectionOpen() {
			return // a late notification: already connected again
		}
		reason := fmt.Sprintf("disconnected from %s: %v", r.currentBroker(), n.Reason)
		r.log.Warn("connection lost", "broker", r.currentBroker(), "error", n.Reason)
		if r.o.Adopt {
			r.lostOnce.Do(func() { close(r.lost) })
		}
		r.setStatus(func(s *receivers.Status) { *s = receivers.Status{Reason: reason} })
	}
}

func (r *Receiver) currentBroker() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broker
}
