package bridge

import (
	"fmt"
	"reflect"

	"github.com/gobridge/gobridge/routes"
)

// parts are the components of one configuration. Reload assembles the
// next from the running one, keeping what did not change. Parts are not
// modified once published, except for the run fields (under Bridge.mu).
type parts struct {
	cfg       *routes.Config
	senders   map[string]*sender
	routes    []*route
	sessions  map[string]*session
	receivers []*recv
}

func (p *parts) route(id string) *route {
	for _, r := range p.routes {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (p *parts) receiver(id string) *recv {
	for _, rc := range p.receivers {
		if rc.id == id {
			return rc
		}
	}
	return nil
}

// routesOf lists the routes that take receiver id's messages.
func (p *parts) routesOf(id string) []*route {
	var rs []*route
	for _, r := range p.routes {
		if r.cfg.Receiver == id {
			rs = append(rs, r)
		}
	}
	return rs
}

// assemble builds the parts of cfg, keeping from old (nil: none) every one
// whose config did not change; it starts nothing. On error it closes what
// it built.
func (b *Bridge) assemble(cfg *routes.Config, old *parts) (p *parts, err error) {
	if old == nil {
		old = &parts{}
	}
	p = &parts{cfg: cfg, senders: map[string]*sender{}, sessions: map[string]*session{}}
	built := p // a failing return sets p to nil
	defer func() {
		if err != nil {
			built.discard(old)
		}
	}()
	maxInFlight := map[string]int{}
	for _, r := range cfg.Routes {
		maxInFlight[r.Sender] = max(maxInFlight[r.Sender], r.Policy.MaxInFlight)
	}
	for _, sc := range cfg.Senders {
		n, used := maxInFlight[sc.ID]
		if o := old.senders[sc.ID]; o != nil && o.maxInFlight == n && reflect.DeepEqual(o.cfg, sc) {
			p.senders[sc.ID] = o
		} else if used {
			s, err := b.newSender(sc, n)
			if err != nil {
				return nil, fmt.Errorf("bridge: sender %s: %w", sc.ID, err)
			}
			p.senders[sc.ID] = s
		}
	}
	maxPayload := map[string]int{}
	for _, rc := range cfg.Receivers {
		maxPayload[rc.ID] = rc.Options.MaxPayloadBytes
	}
	for _, rc := range cfg.Routes {
		s := p.senders[rc.Sender]
		if s == nil {
			return nil, fmt.Errorf("bridge: route %s: unknown sender %q", rc.ID, rc.Sender)
		}
		o := old.route(rc.ID)
		if o != nil && o.health == s.health && o.maxPayload == maxPayload[rc.Receiver] && reflect.DeepEqual(o.cfg, rc) {
			p.routes = append(p.routes, o)
			continue
		}
		r, err := b.newRoute(rc, s, maxPayload[rc.Receiver])
		if err != nil {
			return nil, err
		}
		if o != nil || old.sessions[r.session] != nil { // its predecessor or its session's old drainer must go first
			r.ready = make(chan struct{})
		}
		p.routes = append(p.routes, r)
	}
	if b.store != nil {
		for _, r := range p.routes {
			b.addToSession(p, r)
		}
	}
	for id, s := range p.sessions {
		if o := old.sessions[id]; s.same(o) {
			p.sessions[id] = o
		} else {
			b.newGroup(s)
		}
	}
	for _, rc := range cfg.Receivers {
		if o := old.receiver(rc.ID); o != nil && sameReceiver(o.cfg, rc) && !o.run.exited() { // one that failed starts again
			kept := *o
			kept.cfg = rc
			p.receivers = append(p.receivers, &kept)
			continue
		}
		nr, err := b.newRecv(rc)
		if err != nil {
			return nil, err
		}
		p.receivers = append(p.receivers, nr)
	}
	return p, nil
}

// sameReceiver reports whether a receiver can keep running from a to b:
// nothing changed but, on an embedded listener, its users and ACLs (which
// apply live).
func sameReceiver(a, b routes.ReceiverConfig) bool {
	if a.Type == routes.ReceiverMQTTListener {
		a.Options.Users, a.Options.Anonymous, a.Options.AllowAnonymous = b.Options.Users, b.Options.Anonymous, b.Options.AllowAnonymous
	}
	return reflect.DeepEqual(a, b)
}

// discard releases what p built that old does not have (p was not applied).
func (p *parts) discard(old *parts) {
	for id, s := range p.senders {
		if old.senders[id] != s {
			_ = s.close()
		}
	}
	for _, r := range p.routes {
		if old.route(r.id) != r {
			r.cancel()
		}
	}
}
