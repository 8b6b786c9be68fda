package drainer

import (
	"context"
	"errors"
	"time"

	"github.com/gobridge/gobridge/stores"
)

// memberPrefix starts the names of the member leases of session: one per
// live drainer, named by its owner; live members share the partitions fairly.
func memberPrefix(session string) string { return "member/" + session + "/" }

// fairShare is how many partitions one of members live instances drains.
func fairShare(partitions, members int) int {
	members = max(members, 1)
	return (partitions + members - 1) / members
}

// membership keeps this instance's member lease and its fair share of the
// partition leases. Every LeaseTTL/3 it renews what it holds, counts the
// live members, starts loops on free partitions up to its share and
// gracefully stops loops above it (they release their lease when done).
// It is the only writer of g.parts, so it reads g.parts without g.mu.
type membership struct {
	g      *Group
	member stores.Lease
	exited chan *partition
}

func newMembership(g *Group) *membership {
	return &membership{g: g, exited: make(chan *partition, g.opts.Partitions)}
}

func (m *membership) run(ctx context.Context) {
	g := m.g
	tick := g.opts.LeaseTTL / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case p := <-m.exited:
			m.forget(p)
		case <-t.C:
			m.tick(ctx)
			t.Reset(tick)
		}
	}
	// Shutdown: stop every loop, keep renewing their leases until they are
	// done (a shutdown may outlast the lease TTL), then leave.
	bg := context.WithoutCancel(ctx)
	for _, p := range g.parts {
		p.stop()
	}
	for len(g.parts) > 0 {
		select {
		case p := <-m.exited:
			m.forget(p)
		case <-t.C:
			m.renewHeld(bg)
			t.Reset(tick)
		}
	}
	if m.member.Token != 0 {
		rctx, cancel := context.WithTimeout(bg, settleTimeout)
		defer cancel()
		if err := g.store.Release(rctx, m.member); err != nil && !errors.Is(err, stores.ErrLeaseLost) {
			g.log.Warn("release member lease", "error", err)
		}
	}
}

func (m *membership) forget(p *partition) {
	m.g.mu.Lock()
	if m.g.parts[p.n] == p {
		delete(m.g.parts, p.n)
	}
	m.g.mu.Unlock()
}

// tick renews, counts members and rebalances.
func (m *membership) tick(ctx context.Context) {
	g := m.g
	ctx, cancel := context.WithTimeout(ctx, g.opts.LeaseTTL/3)
	defer cancel()
	now := g.now()
	var err error
	if m.member.Token != 0 {
		m.member, err = g.store.Renew(ctx, m.member, g.opts.LeaseTTL, now)
	}
	if m.member.Token == 0 || err != nil {
		m.member, err = g.store.Acquire(ctx, memberPrefix(g.opts.Session)+g.opts.Owner, g.opts.Owner, g.opts.LeaseTTL, now)
		if err != nil {
			m.member = stores.Lease{}
			g.log.Warn("acquire member lease", "error", err)
		}
	}
	m.renewHeld(ctx)

	members, err := g.store.List(ctx, memberPrefix(g.opts.Session), now)
	if err != nil {
		g.log.Warn("list members", "error", err)
		return
	}
	share := fairShare(g.opts.Partitions, len(members))
	active := 0
	for _, p := range g.parts {
		if !p.stopping() {
			active++
		}
	}
	// Give up partitions above the share, highest first.
	for n := g.opts.Partitions - 1; n >= 0 && active > share; n-- {
		if p := g.parts[n]; p != nil && !p.stopping() {
			g.log.Info("handing partition over", "partition", n, "members", len(members))
			p.stop()
			active--
		}
	}
	// Take free partitions up to the share.
	for n := 0; n < g.opts.Partitions && active < share; n++ {
		if g.parts[n] != nil {
			continue
		}
		start := time.Now()
		l, err := g.store.Acquire(ctx, stores.PartitionLease(g.opts.Session, n), g.opts.Owner, g.opts.LeaseTTL, now)
		if errors.Is(err, stores.ErrLeaseHeld) {
			continue
		}
		if err != nil {
			g.log.Warn("acquire partition lease", "partition", n, "error", err)
			continue
		}
		p := newPartition(g, n, l)
		p.renewed = start
		g.mu.Lock()
		g.parts[n] = p
		g.mu.Unlock()
		active++
		g.log.Info("draining partition", "partition", n, "token", l.Token)
		go p.run(m.exited)
	}
}

// renewHeld renews the lease of every running loop; a loop whose lease is
// lost stops claiming at once.
func (m *membership) renewHeld(ctx context.Context) {
	g := m.g
	ctx, cancel := context.WithTimeout(ctx, g.opts.LeaseTTL/3)
	defer cancel()
	for n, p := range g.parts {
		l := p.lease()
		start := time.Now()
		nl, err := g.store.Renew(ctx, l, g.opts.LeaseTTL, g.now())
		if err != nil {
			// A store hiccup is survivable while the lease still runs, but
			// a holder past Until − margin stops: another owner may take
			// the partition at Until. How long it runs is measured on the
			// monotonic clock from the last renewal's start, not from the
			// stored Until, which a wall-clock step would move.
			if errors.Is(err, stores.ErrLeaseLost) || time.Since(p.renewed) >= g.opts.LeaseTTL-g.opts.LeaseTTL/3 {
				g.log.Warn("partition lease lost", "partition", n, "error", err)
				p.lose()
			} else {
				g.log.Warn("renew partition lease", "partition", n, "error", err)
			}
			continue
		}
		p.setLease(nl)
		p.renewed = start
	}
}
