package drainer

import (
	"container/heap"
	"slices"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// item is one record a partition holds.
type item struct {
	rec   stores.Record
	route *Route
	// env is what is sent: the record's envelope, or for a Raw record the
	// output of the route's processors (prepared once).
	env      *message.Envelope
	prepared bool
	// coWait: an older record of its coalesce key was being sent when it
	// came; it waits for that send to return (see schedule.returned).
	coWait bool
	due    time.Time
	// expires is when the record expires (zero: never) on the clock as it
	// was at scheduled; see partition.schedule.
	expires   time.Time
	scheduled time.Time
	latency   time.Duration // of the last send
	where     place
	heapIdx   int // in schedule.timers
}

// place is where an item is in its schedule.
type place int

const (
	waiting place = iota // behind an older record of its key
	timed                // eligible, waiting for its due time
	ready                // eligible and due
	sending              // taken to send
)

// key is the ordering key of it ("" when it has none): of what is sent, so
// that a Raw record, stored without one, has the key its processors render.
func (it *item) key() string { return it.env.Key }

// schedule orders the records a partition holds: per ordering key one at a
// time, in the order they were added (Seq order: see partition.absorb),
// each once its due time has passed.
type schedule struct {
	keys   map[string][]*item // records of one key; the head is the eligible one
	ready  map[string][]*item // per route: eligible and due, in order
	timers timerHeap          // eligible, not due yet
	byCo   map[[2]string]*item
}

func newSchedule() *schedule {
	return &schedule{keys: map[string][]*item{}, ready: map[string][]*item{}, byCo: map[[2]string]*item{}}
}

// add takes a record in. It returns the item it supersedes by coalescing
// (the held, unsent record of the same route and coalesce key received
// earlier), which the caller settles as done; or it itself when a newer one
// is held (then it was not added). A record whose older one is being sent
// waits for that send (see returned): it must not overtake it.
func (s *schedule) add(it *item, now time.Time) (superseded *item) {
	if ck := it.rec.CoalesceKey; ck != "" {
		k := [2]string{it.rec.Route, ck}
		if old := s.byCo[k]; old != nil {
			if !stores.Supersedes(&it.rec, &old.rec, now) {
				return it
			}
			if it.coWait = old.where == sending || old.coWait; old.where != sending {
				if old.due.After(it.due) { // a backed-off key stays backed off
					it.due = old.due
				}
				s.done(old, now)
				superseded = old
			}
		}
		s.byCo[k] = it
	}
	it.where = waiting
	if k := it.key(); k != "" {
		s.keys[k] = append(s.keys[k], it)
		if len(s.keys[k]) > 1 {
			return superseded
		}
	}
	if !it.coWait {
		s.eligible(it, now)
	}
	return superseded
}

// returned ends the wait of the record of sent's coalesce key that came
// while sent was being sent, and returns it (nil: none). When sent is
// still held (its send failed) that record replaces it: the caller settles
// sent as coalesced, and the record is due no earlier than sent was.
func (s *schedule) returned(sent *item, now time.Time) (newer *item) {
	ck := sent.rec.CoalesceKey
	if ck == "" {
		return nil
	}
	newer = s.byCo[[2]string{sent.rec.Route, ck}]
	if newer == nil || newer == sent || !newer.coWait {
		return nil
	}
	newer.coWait = false
	if held := sent.where == timed || sent.where == ready; held && sent.due.After(newer.due) {
		newer.due = sent.due
	}
	if k := newer.key(); newer.where == waiting && (k == "" || s.keys[k][0] == newer) {
		s.eligible(newer, now)
	}
	return newer
}

// eligible queues an item whose key lets it go.
func (s *schedule) eligible(it *item, now time.Time) {
	if it.due.After(now) {
		it.where = timed
		heap.Push(&s.timers, it)
		return
	}
	it.where = ready
	s.ready[it.rec.Route] = append(s.ready[it.rec.Route], it)
}

// tick moves the items due at now to their ready queues and returns when
// the next one is due (zero when none waits).
func (s *schedule) tick(now time.Time) time.Time {
	for len(s.timers) > 0 && !s.timers[0].due.After(now) {
		s.eligible(heap.Pop(&s.timers).(*item), now)
	}
	if len(s.timers) == 0 {
		return time.Time{}
	}
	return s.timers[0].due
}

// bound brings every held item due more than its route's
// backoff.max_interval after now back to that: after the wall clock was
// stepped back, no record waits for the length of the step.
func (s *schedule) bound(now time.Time) {
	clamp := func(it *item) {
		if limit := now.Add(it.route.Policy.Backoff.Max); it.due.After(limit) {
			it.due = limit
		}
	}
	for _, it := range s.timers {
		clamp(it)
	}
	for _, q := range s.keys {
		for _, it := range q {
			clamp(it)
		}
	}
	heap.Init(&s.timers)
}

// take removes the oldest ready item of route, to send it.
func (s *schedule) take(route string) *item {
	it := s.ready[route][0]
	s.ready[route] = s.ready[route][1:]
	it.where = sending
	return it
}

// retry puts a sent item back, due at due; it stays the head of its key.
func (s *schedule) retry(it *item, due time.Time, now time.Time) {
	it.due = due
	s.eligible(it, now)
}

// done forgets a settled item and makes the next record of its key
// eligible.
func (s *schedule) done(it *item, now time.Time) {
	s.remove(it)
	if k := it.key(); k != "" && len(s.keys[k]) > 0 {
		if next := s.keys[k][0]; next.where == waiting && !next.coWait {
			s.eligible(next, now)
		}
	}
}

// remove takes it out of every structure.
func (s *schedule) remove(it *item) {
	switch it.where {
	case timed:
		heap.Remove(&s.timers, it.heapIdx)
	case ready:
		s.ready[it.rec.Route] = without(s.ready[it.rec.Route], it)
	}
	it.where = sending // out of every queue
	if k := it.key(); k != "" {
		if q := without(s.keys[k], it); len(q) == 0 {
			delete(s.keys, k)
		} else {
			s.keys[k] = q
		}
	}
	if ck := it.rec.CoalesceKey; ck != "" && s.byCo[[2]string{it.rec.Route, ck}] == it {
		delete(s.byCo, [2]string{it.rec.Route, ck})
	}
}

// without returns q without it (a copy when it was there).
func without(q []*item, it *item) []*item {
	if i := slices.Index(q, it); i >= 0 {
		return append(q[:i:i], q[i+1:]...)
	}
	return q
}

// timerHeap orders items by due time, then Seq.
type timerHeap []*item

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].rec.Seq < h[j].rec.Seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *timerHeap) Push(x any) {
	it := x.(*item)
	it.heapIdx = len(*h)
	*h = append(*h, it)
}
func (h *timerHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}
