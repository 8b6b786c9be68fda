package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// orderRun is one randomized run: instances that each append (some records
// claimed, to the partitions they own) and own partitions (claim, deliver
// in Seq order, settle Done), while partitions change hands.
type orderRun struct {
	t          *testing.T
	session    string
	partitions int
	ttl        time.Duration
	clock      atomic.Int64 // the leases' clock, in ns after t0: takeovers move it past every lease
	batches    atomic.Int64 // batches appended so far: every tenth, its appender takes a partition over
	failed     atomic.Int64 // Writes and Claims that failed and were retried
	stopping   atomic.Bool
	stop       chan struct{}

	mu       sync.Mutex
	appended map[string]appended // envelope ID → who appended it, in what order
	claimed  map[int64][]string  // token → IDs Claim returned under it, in order
	sent     map[string][]pos    // envelope ID → deliveries (the first ones must follow append order)
	done     map[string]int      // envelope ID → successful Done settlements (one expected)
}

type appended struct {
	appender int
	key      string
	n        int // its place among the appender's records of key
	token    int64
	seq      int64
}

// pos is where a delivery happened: the owner epoch (token) and the place
// in that epoch's deliveries.
type pos struct{ token, i int64 }

type instance struct {
	id int
	s  *dynamodb.Store

	mu   sync.Mutex
	held map[int]*epoch // partitions this instance owns
	wake chan struct{}  // signalled when it acquires one
}

// epoch is one tenure of a partition: its lease and what is held under it.
type epoch struct {
	le      stores.Lease
	after   int64           // every live record with Seq <= after is held
	own     []stores.Record // appended claimed by this instance, not yet delivered
	pending []stores.Record // claimed, not yet delivered
	seen    map[string]bool // claimed or appended under this token
	n       int64           // deliveries so far
}

func (o *orderRun) now() time.Time { return t0.Add(time.Duration(o.clock.Load())) }

func TestWrite_PerKeyOrderAcrossInstancesAndTakeovers(t *testing.T) {
	t.Parallel()
	for seed := range uint64(2) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			runOrder(t, seed)
		})
	}
}

func runOrder(t *testing.T, seed uint64) {
	o := &orderRun{t: t, session: uniqueName("order-"), partitions: 2, ttl: time.Hour,
		appended: map[string]appended{}, claimed: map[int64][]string{}, sent: map[string][]pos{}, done: map[string]int{},
		stop: make(chan struct{})}
	const instances, batches = 4, 30
	ins := make([]*instance, instances)
	for i := range ins {
		// One transaction attempt in seven never reaches DynamoDB (a
		// keep-alive connection the server closed): the SDK sends it again
		// after other instances committed, and a refusal then fails the
		// Write, which cannot know the first attempt was not applied.
		s := open(t, &counter{delay: 20 * time.Millisecond, drop: 7}, fastRetries)
		ins[i] = &instance{id: i, s: s, held: map[int]*epoch{}, wake: make(chan struct{}, 1)}
	}
	for p := range o.partitions {
		o.acquire(ins[p%instances], p, true)
	}
	var appenders, owners sync.WaitGroup
	for _, in := range ins {
		rnd := rand.New(rand.NewPCG(seed, uint64(in.id)))
		appenders.Go(func() { o.appendLoop(in, rnd, batches) })
		owners.Go(func() { o.ownLoop(in) })
	}
	appenders.Wait()
	o.stopping.Store(true)
	close(o.stop)
	owners.Wait()
	if t.Failed() {
		return
	}
	// A last owner drains every partition.
	last := &instance{id: instances, s: open(t, nil), held: map[int]*epoch{}, wake: make(chan struct{}, 1)}
	for p := range o.partitions {
		o.clock.Add(int64(o.ttl) + 1)
		o.acquire(last, p, true)
		o.drain(last, p, true)
	}
	o.check()
}

// acquire takes partition p for in; a takeover (must false) may lose to
// a concurrent one that moved the clock further.
func (o *orderRun) acquire(in *instance, p int, must bool) {
	le, err := in.s.Acquire(context.Background(), stores.PartitionLease(o.session, p), fmt.Sprint("i", in.id), o.ttl, o.now())
	if errors.Is(err, stores.ErrLeaseHeld) && !must {
		return
	}
	if err != nil {
		o.t.Errorf("instance %d: acquire %d: %v", in.id, p, err)
		return
	}
	in.mu.Lock()
	in.held[p] = &epoch{le: le, seen: map[string]bool{}}
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// appendLoop appends batches of records with keys shared by every
// appender; records of partitions the instance owns go claimed.
func (o *orderRun) appendLoop(in *instance, rnd *rand.Rand, batches int) {
	next := map[string]int{}
	for range batches {
		var b stores.Batch
		for range 1 + rnd.IntN(6) {
			k := "key-" + strconv.Itoa(rnd.IntN(10))
			p := stores.PartitionOf(k, o.partitions)
			r := stores.Record{Session: o.session, Route: "r", Partition: p, CreatedAt: t0,
				Envelope: message.Envelope{ID: message.NewID(), Key: k, Payload: []byte("x"), ReceivedAt: t0}}
			in.mu.Lock()
			if e := in.held[p]; e != nil {
				r.Token = e.le.Token
			}
			in.mu.Unlock()
			b.Append = append(b.Append, r)
		}
		if err := o.write(in, &b); err != nil {
			o.t.Errorf("instance %d: append: %v", in.id, err)
			return
		}
		o.mu.Lock()
		for _, r := range b.Append {
			if r.Seq == 0 {
				o.t.Errorf("record %s not appended", r.Envelope.ID)
			}
			o.appended[r.Envelope.ID] = appended{appender: in.id, key: r.Envelope.Key, n: next[r.Envelope.Key], token: r.Token, seq: r.Seq}
			next[r.Envelope.Key]++
		}
		o.mu.Unlock()
		in.mu.Lock()
		for _, r := range b.Append {
			if e := in.held[r.Partition]; r.Token != 0 && e != nil && e.le.Token == r.Token {
				e.own = append(e.own, r)
				e.seen[r.Envelope.ID] = true
			}
		}
		in.mu.Unlock()
		if o.batches.Add(1)%10 == 0 { // take a partition over: its lease lapses, whoever holds it
			o.clock.Add(int64(o.ttl) + 1)
			o.acquire(in, rnd.IntN(o.partitions), false)
		}
	}
}

// ownLoop drains the partitions the instance owns until the appenders
// are done.
func (o *orderRun) ownLoop(in *instance) {
	for !o.stopping.Load() && !o.t.Failed() {
		in.mu.Lock()
		parts := make([]int, 0, len(in.held))
		for p := range in.held {
			parts = append(parts, p)
		}
		in.mu.Unlock()
		if len(parts) == 0 {
			select {
			case <-in.wake:
			case <-o.stop:
			}
		}
		for _, p := range parts {
			o.drain(in, p, false)
		}
	}
}

// drain delivers what instance in holds of partition p in Seq order: its
// own claimed appends (snapshot first), then claims until the partition
// has nothing more below its counter, then settles every delivery Done.
func (o *orderRun) drain(in *instance, p int, all bool) {
	ctx := context.Background()
	in.mu.Lock()
	e := in.held[p]
	if e == nil {
		in.mu.Unlock()
		return
	}
	own := e.own
	e.own = nil
	in.mu.Unlock()
	for fails := 0; ; {
		got, err := in.s.Claim(ctx, stores.ClaimRequest{Session: o.session, Partition: p, Token: e.le.Token, Limit: 3, After: e.after})
		if err != nil && !errors.Is(err, stores.ErrLeaseLost) && fails < maxFails {
			// As the drainer does: ignore what it returned, claim again
			// under the same token (the store returns what it took).
			fails++
			o.failed.Add(1)
			o.t.Logf("instance %d: claim failed, claiming again: %v", in.id, err)
			continue
		}
		if errors.Is(err, stores.ErrLeaseLost) {
			in.mu.Lock()
			if in.held[p] == e {
				delete(in.held, p)
			}
			in.mu.Unlock()
			return
		}
		if err != nil {
			o.t.Errorf("claim: %v", err)
			return
		}
		o.mu.Lock()
		in.mu.Lock()
		for _, r := range got {
			if e.seen[r.Envelope.ID] {
				o.t.Errorf("token %d: %s claimed twice (or claimed while held)", e.le.Token, r.Envelope.ID)
			}
			e.seen[r.Envelope.ID] = true
			if r.Seq <= e.after || r.Token != e.le.Token || r.Partition != p {
				o.t.Errorf("token %d: claimed %+v after seq %d", e.le.Token, r, e.after)
			}
			e.after = r.Seq
			o.claimed[e.le.Token] = append(o.claimed[e.le.Token], r.Envelope.ID)
		}
		in.mu.Unlock()
		o.mu.Unlock()
		e.pending = append(e.pending, got...)
		if len(got) < 3 {
			break
		}
	}
	deliver := append(own, e.pending...)
	slices.SortFunc(deliver, func(a, b stores.Record) int { return int(a.Seq - b.Seq) })
	e.pending = nil
	if n := 1 + len(deliver)/2; !all && len(deliver) > n {
		// Keep the newer half for later: some will be taken over.
		e.pending, deliver = slices.Clone(deliver[n:]), deliver[:n]
	}
	b := stores.Batch{}
	o.mu.Lock()
	for _, r := range deliver {
		e.n++
		o.sent[r.Envelope.ID] = append(o.sent[r.Envelope.ID], pos{e.le.Token, e.n})
		b.Settle = append(b.Settle, stores.Settlement{Key: r.Key(), Token: e.le.Token, Outcome: stores.Done})
	}
	o.mu.Unlock()
	if err := o.write(in, &b); err != nil {
		o.t.Errorf("settle: %v", err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, st := range b.Settle {
		if !st.Stale {
			o.done[st.ID]++
		}
	}
}

// maxFails bounds the failures of one batch's Writes, and of one drain's Claims.
const maxFails = 20

// write commits b as the bridge's writer does: a failed Write is retried
// with the same Batch, which then reports what a failed attempt stored (or
// may have) as stored by it (see stores.Batch).
func (o *orderRun) write(in *instance, b *stores.Batch) error {
	for fails := 0; ; fails++ {
		err := in.s.Write(context.Background(), b)
		if err == nil || fails == maxFails {
			return err
		}
		o.failed.Add(1)
		o.t.Logf("instance %d: write failed, writing the batch again: %v", in.id, err)
	}
}

func (o *orderRun) check() {
	t := o.t
	for token, ids := range o.claimed {
		if len(slices.Compact(slices.Sorted(slices.Values(ids)))) != len(ids) {
			t.Errorf("token %d claimed a record twice", token)
		}
	}
	type ak struct {
		appender int
		key      string
	}
	last := map[ak]pos{}
	byPlace := map[ak][]string{}
	for id, a := range o.appended {
		if o.done[id] != 1 {
			t.Errorf("record %s (appender %d, %s #%d) settled Done %d times", id, a.appender, a.key, a.n, o.done[id])
		}
		k := ak{a.appender, a.key}
		for len(byPlace[k]) <= a.n {
			byPlace[k] = append(byPlace[k], "")
		}
		byPlace[k][a.n] = id
	}
	for k, ids := range byPlace {
		for i, id := range ids {
			if i > 0 && o.appended[id].seq <= o.appended[ids[i-1]].seq {
				t.Errorf("appender %d, %s: record #%d has seq %d, not above #%d's", k.appender, k.key, i, o.appended[id].seq, i-1)
			}
			d := o.sent[id]
			if len(d) == 0 {
				continue
			}
			if prev, ok := last[k]; ok && (d[0].token < prev.token || d[0].token == prev.token && d[0].i <= prev.i) {
				t.Errorf("appender %d, %s: record #%d first delivered at %v, before #%d at %v", k.appender, k.key, i, d[0], i-1, prev)
			}
			last[k] = d[0]
		}
	}
	if len(o.appended) < 100 {
		t.Errorf("only %d records appended", len(o.appended))
	}
	t.Logf("%d records, %d epochs, %d failed Writes and Claims retried", len(o.appended), len(o.claimed), o.failed.Load())
}
