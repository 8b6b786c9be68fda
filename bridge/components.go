package bridge

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders/stdout"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

// route is one configured route, ready to take messages.
type route struct {
	cfg        routes.RouteConfig
	id         string
	mode       string
	sender     drainer.Sender
	process    processFunc // nil: no processors
	session    string
	partitions int
	group      *drainer.Group
	hold       *holder // direct_hold only
	dlq        bool    // permanent failures are dead-lettered (else dropped)
}

// processFunc runs a route's processor chain on env (which it may change).
type processFunc func(env *message.Envelope) (drop bool, coalesceKey string, err error)

// openStores opens the outbox and lease stores named by stores.outbox and
// stores.lease (lease defaults to memory). An outbox and a lease store on
// the same SQLite file share one handle.
func (rt *Runtime) openStores() error {
	sc := rt.cfg.Stores
	rt.sqlite = sqliteStores{}
	if sc.Outbox != nil {
		var st stores.Store
		opened := true
		var err error
		if sc.Outbox.Type == "memory" {
			st = memory.New()
		} else {
			st, opened, err = rt.openOutboxBackend(*sc.Outbox)
		}
		if err != nil {
			return fmt.Errorf("bridge: open outbox store: %w", err)
		}
		rt.outbox = st
		if opened {
			rt.closers = append(rt.closers, st.Close)
		}
	}
	lc := routes.StoreConfig{Type: "memory"}
	if sc.Lease != nil {
		lc = *sc.Lease
	}
	var ls stores.Leases
	opened := true
	var err error
	if lc.Type == "memory" || lc.Type == "" {
		ls = memory.NewLeases()
	} else {
		ls, opened, err = rt.openLeasesBackend(lc)
	}
	if err != nil {
		return fmt.Errorf("bridge: open lease store: %w", err)
	}
	rt.leases = ls
	if opened {
		rt.closers = append(rt.closers, ls.Close)
	}
	return nil
}

// buildSenders constructs every sender that a route uses, keyed by id.
func (rt *Runtime) buildSenders(log *slog.Logger, out io.Writer) (map[string]drainer.Sender, error) {
	maxInFlight := map[string]int{}
	for _, r := range rt.cfg.Routes {
		maxInFlight[r.Sender] = max(maxInFlight[r.Sender], cmp.Or(r.Policy.MaxInFlight, 100))
	}
	built := map[string]drainer.Sender{}
	for _, sc := range rt.cfg.Senders {
		if _, used := maxInFlight[sc.ID]; !used {
			continue
		}
		var s drainer.Sender
		var err error
		switch sc.Type {
		case routes.SenderStdout:
			s = stdout.New(out)
		default:
			s, err = newSenderBackend(sc, maxInFlight[sc.ID], log)
		}
		if err != nil {
			return nil, fmt.Errorf("bridge: sender %s: %w", sc.ID, err)
		}
		if c, ok := s.(interface{ Close() error }); ok {
			rt.closers = append(rt.closers, c.Close)
		}
		built[sc.ID] = s
	}
	return built, nil
}

// buildRoutes compiles each route: processors, ordering key, message.
func (rt *Runtime) buildRoutes(senders map[string]drainer.Sender) error {
	for _, rc := range rt.cfg.Routes {
		r := &route{
			cfg: rc, id: rc.ID, mode: cmp.Or(rc.DeliveryMode, routes.DirectHold),
			sender: senders[rc.Sender],
		}
		if r.sender == nil {
			return fmt.Errorf("bridge: route %s: unknown sender %q", rc.ID, rc.Sender)
		}
		proc, err := compileProcessors(rc)
		if err != nil {
			return fmt.Errorf("bridge: route %s: %w", rc.ID, err)
		}
		r.process = proc
		pol := rc.Policy.OnPermanentFailure
		if pol == "" && rt.outbox != nil {
			pol = routes.PolicyDLQ
		}
		r.dlq = pol == routes.PolicyDLQ && rt.outbox != nil
		switch r.mode {
		case routes.SharedOutbox:
			if rt.outbox == nil {
				return fmt.Errorf("bridge: route %s: shared_outbox needs stores.outbox", rc.ID)
			}
			if rc.Session.ID == "" {
				return fmt.Errorf("bridge: route %s: shared_outbox needs session.id", rc.ID)
			}
			r.session = rc.Session.ID
			r.partitions = max(rc.Session.Partitions, 1)
			if rt.sessions[r.session] == nil {
				rt.sessions[r.session] = &sessionInfo{
					id: r.session, partitions: r.partitions,
					stallAfter: cmp.Or(rc.Session.StallAfter.D(), defaultStallAfter),
				}
			}
		case routes.DirectHold:
			r.hold = newHolder(rt, r)
		default:
			return fmt.Errorf("bridge: route %s: unknown delivery_mode %q", rc.ID, r.mode)
		}
		rt.metrics.initRoute(r.id)
		rt.routes = append(rt.routes, r)
	}
	return nil
}

// buildReceivers constructs each receiver with its own ingest sink.
func (rt *Runtime) buildReceivers(log *slog.Logger) error {
	for _, rc := range rt.cfg.Receivers {
		in := &ingest{rt: rt, receiver: rc.ID}
		for _, r := range rt.routes {
			if r.cfg.Receiver == rc.ID {
				in.routes = append(in.routes, r)
			}
		}
		rcv, err := newReceiverBackend(rc, in, log)
		if err != nil {
			return fmt.Errorf("bridge: receiver %s: %w", rc.ID, err)
		}
		rt.metrics.initReceiver(rc.ID)
		rt.receivers = append(rt.receivers, namedReceiver{id: rc.ID, r: rcv})
	}
	return nil
}
