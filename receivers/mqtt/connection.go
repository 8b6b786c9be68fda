package mqtt

import (
	"fmt"

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
	for _, sub := range topics {
		tok := c.Subscribe(sub.Filter, sub.QoS, nil)
		if !tok.WaitTimeout(subscribeTimeout) {
			r.subscribeFailed(sub, "got no SUBACK within "+subscribeTimeout.String())
			return
		}
		if err := tok.Error(); err != nil {
			r.subscribeFailed(sub, err.Error())
			return
		}
		for _, granted := range tok.(*paho.SubscribeToken).Result() {
			switch {
			case granted == 0x80:
				r.subscribeFailed(sub, "was refused by the broker")
				return
			case granted == 0 && sub.QoS > 0:
				r.subscribeFailed(sub, fmt.Sprintf("was granted QoS 0 (asked for %d): the broker may drop its messages", sub.QoS))
				return
			case granted < sub.QoS:
				r.log.Info("broker granted a lower qos", "topic", sub.Filter, "requested", sub.QoS, "granted", granted)
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
	r.log.Info("subscribed", "topics", len(topics))
}

func (r *Receiver) subscribeFailed(sub Subscription, why string) {
	reason := fmt.Sprintf("subscription to %s %s", sub.Filter, why)
	r.log.Error("subscribe failed", "topic", sub.Filter, "error", why)
	r.setStatus(func(s *receivers.Status) {
		s.Subscribed = false
		s.Reason = reason
	})
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
