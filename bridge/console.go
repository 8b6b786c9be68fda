package bridge

import (
	"time"

	"github.com/gobridge/gobridge/admin"
	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/routes"
)

// This file wires the operator tools (package admin): the delivery journal
// that the drainers report to, and the admin API (/api/) and console
// (/console) on the admin server.

// journalObserver reports drainer events to the bridge's observer
// (metrics, stall detection) and to the delivery journal.
type journalObserver struct {
	*observer
	j *admin.Journal
}

func (o journalObserver) Delivered(out drainer.Outcome) {
	o.observer.Delivered(out)
	o.j.Delivered(out)
}

func (o journalObserver) Limit(route string, n int) {
	o.observer.Limit(route, n)
	o.j.Limit(route, n)
}

func (o journalObserver) InFlight(route string, n int) {
	o.observer.InFlight(route, n)
	o.j.InFlight(route, n)
}

func (o journalObserver) Sent(session string, at time.Time) {
	o.observer.Sent(session, at)
	o.j.Sent(session, at)
}

// drainObserver is the observer every drainer group reports to. It creates
// the journal on first use and registers the outbox routes in it.
func (rt *Runtime) drainObserver() drainer.Observer {
	if rt.journal == nil {
		rt.journal = admin.NewJournal(0)
		for _, r := range rt.routes {
			if r.mode == routes.SharedOutbox {
				rt.journal.Register(r.session, r.id)
			}
		}
	}
	return journalObserver{observer: &observer{rt: rt}, j: rt.journal}
}

// mountOperatorTools mounts the admin API and console on the admin server.
// With bridge.admin.token every /api/ call needs it; without, reads are open
// and mutations come only from loopback. Foreign Host headers are refused
// (package admin).
func (rt *Runtime) mountOperatorTools() {
	_ = rt.drainObserver() // make sure the journal exists (no outbox routes: empty)
	a := rt.cfg.Bridge.Admin
	listen := ""
	if a.Listen != nil {
		listen = *a.Listen
	}
	h := admin.New(admin.Options{
		Store:        rt.outbox,
		Journal:      rt.journal,
		Token:        a.Token.Reveal(),
		Listen:       listen,
		AllowedHosts: a.AllowedHosts,
		Logger:       rt.log,
		Wake: func(session string, partition int) {
			if g := rt.groups[session]; g != nil {
				g.Wake(partition)
			}
		},
	})
	rt.ops = h
	rt.admin.mux.Handle("/api/", h)
	rt.admin.mux.Handle("/console", h)
	rt.admin.mux.Handle("/console/", h)
}

// Journal returns the delivery journal (outcomes of the outbox drainers).
func (rt *Runtime) Journal() *admin.Journal { return rt.journal }
