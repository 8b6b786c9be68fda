package listener

import (
	"slices"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
)

// What one client can make the broker keep is bounded: MaxSubscriptions
// topic filters per session, and per identity (see access) at most
// MaxClients disconnected sessions (dropOldestSession), each kept at most
// SessionExpiry.

// MaxSubscriptions is how many topic filters one client (its session) may
// hold; the filters of a SUBSCRIBE beyond it get SUBACK 0x80 (MQTT 5:
// 0x97, quota exceeded).
const MaxSubscriptions = 100

// overQuota replaces a filter past MaxSubscriptions in a SUBSCRIBE: mochi
// refuses it as an invalid filter (0x80; MQTT 5: 0x8F, which OnSubscribed
// turns into 0x97).
const overQuota = "#/over-quota"

// OnSubscribe refuses the filters that would take the client past
// MaxSubscriptions; subscribing again to a filter it holds still counts
// once.
func (h *hook) OnSubscribe(cl *mochi.Client, pk packets.Packet) packets.Packet {
	n := cl.State.Subscriptions.Len()
	pk.Filters = slices.Clone(pk.Filters)
	for i, f := range pk.Filters {
		if _, held := cl.State.Subscriptions.Get(f.Filter); !held {
			if n++; n > MaxSubscriptions && !cl.Net.Inline {
				pk.Filters[i].Filter = overQuota
			}
		}
	}
	return pk
}

// OnSubscribed sets the reason code of the filters OnSubscribe refused:
// the SUBACK mochi writes next shares codes.
func (h *hook) OnSubscribed(cl *mochi.Client, pk packets.Packet, codes []byte) {
	for i, f := range pk.Filters {
		if f.Filter == overQuota && cl.Properties.ProtocolVersion == 5 && i < len(codes) {
			codes[i] = packets.ErrQuotaExceeded.Code
		}
	}
}

// OnSessionEstablished drops the client's claim (see
// OnConnectAuthenticate): mochi registered its session.
func (h *hook) OnSessionEstablished(cl *mochi.Client, _ packets.Packet) { h.l.unclaim(cl) }

// OnClientExpired drops an expired session's claim (left when its CONNACK
// could not be sent) and its subscriptions, which mochi would keep in its
// topic index for good.
func (h *hook) OnClientExpired(cl *mochi.Client) {
	h.l.unclaim(cl)
	h.l.srv.UnsubscribeClient(cl)
}

// unclaim drops cl's claim on its client ID, if it still holds it.
func (l *Listener) unclaim(cl *mochi.Client) {
	l.mu.Lock()
	if l.claims[cl.ID] == cl {
		delete(l.claims, cl.ID)
	}
	l.mu.Unlock()
}

// dropOldestSession runs, under l.mu, when identity connects under a new
// client ID: if it already holds MaxClients disconnected sessions, the one
// disconnected longest ago (to the second) is dropped with its
// subscriptions and queued messages. A session with a claim (a CONNECT in
// progress) is not a candidate, so none is registered under its ID
// meanwhile.
func (l *Listener) dropOldestSession(identity string) {
	var oldest *mochi.Client
	n := 0
	for id, c := range l.srv.Clients.GetAll() {
		if c.StopTime() == 0 || c.Net.Inline || string(c.Properties.Username) != identity || l.claims[id] != nil {
			continue
		}
		if n++; oldest == nil || c.StopTime() < oldest.StopTime() {
			oldest = c
		}
	}
	if n < l.o.MaxClients {
		return
	}
	l.srv.UnsubscribeClient(oldest)
	oldest.ClearInflights()
	l.srv.Clients.Delete(oldest.ID)
	if d := l.dropped.Add(1); d&(d-1) == 0 {
		l.log.Warn("session dropped: its identity holds max_clients disconnected sessions", "username", identity,
			"client", oldest.ID, "max_clients", l.o.MaxClients, "count", d)
	}
}
