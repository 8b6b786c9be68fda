package admin

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/redact"
)

// DefaultJournalSize is how many outcomes a Journal keeps per route.
const DefaultJournalSize = 300

// Throughput buckets: Bucket wide, Buckets of them (ten minutes).
const (
	Bucket  = 10 * time.Second
	Buckets = 60
)

// maxErrLen bounds the error text kept per journal entry.
const maxErrLen = 512

// Entry is one delivery outcome in the journal. It never holds a payload.
type Entry struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	Route   string `json:"route"`
	// Outcome is one of the drainer.Result* values (ok, retried, capacity,
	// dead_lettered, dropped, expired, stale).
	Outcome string `json:"outcome"`
	Attempt int    `json:"attempt"`
	// Error is the send error or dead-letter reason (redacted by package
	// redact, then truncated); "" on ok.
	Error     string    `json:"error,omitempty"`
	LatencyMS float64   `json:"latency_ms"`
	At        time.Time `json:"at"`
}

// Point is one throughput bucket of a route: outcomes that ended in Bucket
// starting at Start.
type Point struct {
	Start  time.Time `json:"start"`
	OK     int       `json:"ok"`
	Failed int       `json:"failed"` // every outcome other than ok
}

// RouteActivity is what the journal knows about one route.
type RouteActivity struct {
	Route   string `json:"route"`
	Session string `json:"session"`
	// InFlight and Limit are the drainer's last reports (sends in flight,
	// AIMD concurrency limit); zero before the first.
	InFlight int `json:"in_flight"`
	Limit    int `json:"limit"`
	// OKPerSecond and FailedPerSecond average the last minute.
	OKPerSecond     float64 `json:"ok_per_second"`
	FailedPerSecond float64 `json:"failed_per_second"`
	// Totals counts outcomes by result since the journal started.
	Totals map[string]int64 `json:"totals"`
	// Throughput is the last Buckets buckets, oldest first.
	Throughput []Point    `json:"throughput"`
	LastAt     *time.Time `json:"last_at,omitempty"`
}

// Journal keeps the last outcomes of every route in memory (a ring of
// DefaultJournalSize per route), throughput per Bucket, and the drainer's
// in-flight and limit reports. It implements drainer.Observer, so the
// bridge can pass it to the drainer (next to its own observer). It is safe
// for concurrent use and its methods never block for long.
type Journal struct {
	size int

	mu       sync.Mutex
	routes   map[string]*routeJournal
	lastSent map[string]time.Time // session -> last successful send
	senders  map[string]SenderState
}

// SenderState is a sender's health as the console shows it (DESIGN.md
// §11.3): down after consecutive failures of the target, with the last
// target error and when it changed.
type SenderState struct {
	Sender    string    `json:"sender"`
	Up        bool      `json:"up"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since"`
}

type routeJournal struct {
	session  string
	ring     []Entry // the last size entries, oldest first
	inFlight int
	limit    int
	totals   map[string]int64
	buckets  [Buckets]Point // by slot % Buckets (slot: unix time / Bucket)
	last     time.Time
}

var _ drainer.Observer = (*Journal)(nil)

// NewJournal returns a journal keeping size outcomes per route (size <= 0
// means DefaultJournalSize).
func NewJournal(size int) *Journal {
	if size <= 0 {
		size = DefaultJournalSize
	}
	return &Journal{size: size, routes: map[string]*routeJournal{}, lastSent: map[string]time.Time{},
		senders: map[string]SenderState{}}
}

// SenderState records a sender's transition between up and down.
func (j *Journal) SenderState(sender string, up bool, lastErr string) {
	lastErr = truncate(redact.Text(lastErr), maxErrLen)
	j.mu.Lock()
	j.senders[sender] = SenderState{Sender: sender, Up: up, LastError: lastErr, Since: time.Now()}
	j.mu.Unlock()
}

// Senders returns the senders that changed state since the journal started
// (the others are up), by name.
func (j *Journal) Senders() []SenderState {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := slices.AppendSeq(make([]SenderState, 0, len(j.senders)), maps.Values(j.senders))
	slices.SortFunc(out, func(a, b SenderState) int { return cmp.Compare(a.Sender, b.Sender) })
	return out
}

// Abandoned implements drainer.Observer; abandoned sends show as transient
// outcomes already.
func (j *Journal) Abandoned(string) {}

// Register makes a route known before its first outcome, so the console
// lists it (with its session) from the start.
func (j *Journal) Register(session, route string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.route(route).session = session
}

// Forget drops what the journal keeps of routes, sessions and senders
// that a reload removed.
func (j *Journal) Forget(routes, sessions, senders []string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, id := range routes {
		delete(j.routes, id)
	}
	for _, id := range sessions {
		delete(j.lastSent, id)
	}
	for _, id := range senders {
		delete(j.senders, id)
	}
}

// route returns the journal of route, creating it. The caller holds mu.
func (j *Journal) route(route string) *routeJournal {
	r := j.routes[route]
	if r == nil {
		r = &routeJournal{totals: map[string]int64{}}
		j.routes[route] = r
	}
	return r
}

// Delivered implements drainer.Observer: it records o.
func (j *Journal) Delivered(o drainer.Outcome) {
	e := Entry{ID: o.ID, Session: o.Session, Route: o.Route, Outcome: o.Result, Attempt: o.Attempt,
		Error: truncate(redact.Text(o.Err), maxErrLen), LatencyMS: float64(o.Latency.Microseconds()) / 1000,
		At: cmp.Or(o.At, time.Now())}
	slot := e.At.UnixNano() / int64(Bucket)
	j.mu.Lock()
	defer j.mu.Unlock()
	r := j.route(o.Route)
	if o.Session != "" {
		r.session = o.Session
	}
	r.ring = append(r.ring, e)
	if len(r.ring) > j.size {
		r.ring = r.ring[1:]
	}
	r.totals[o.Result]++
	if e.At.After(r.last) {
		r.last = e.At
	}
	b := &r.buckets[slot%Buckets]
	if start := slotStart(slot); !b.Start.Equal(start) {
		*b = Point{Start: start}
	}
	if o.Result == drainer.ResultOK {
		b.OK++
	} else {
		b.Failed++
	}
}

// Limit implements drainer.Observer.
func (j *Journal) Limit(route string, limit int) {
	j.mu.Lock()
	j.route(route).limit = limit
	j.mu.Unlock()
}

// InFlight implements drainer.Observer.
func (j *Journal) InFlight(route string, n int) {
	j.mu.Lock()
	j.route(route).inFlight = n
	j.mu.Unlock()
}

// Sent implements drainer.Observer.
func (j *Journal) Sent(session string, at time.Time) {
	j.mu.Lock()
	if at.After(j.lastSent[session]) {
		j.lastSent[session] = at
	}
	j.mu.Unlock()
}

// Entries returns up to limit entries of route (all routes when ""), newest
// first. limit <= 0 means every entry kept.
func (j *Journal) Entries(route string, limit int) []Entry {
	j.mu.Lock()
	var out []Entry
	for id, r := range j.routes {
		if route == "" || id == route {
			out = append(out, r.ring...)
		}
	}
	j.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Entry) int { return b.At.Compare(a.At) })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Routes returns the activity of every known route, sorted by session and
// route.
func (j *Journal) Routes() []RouteActivity {
	now := time.Now()
	cur := now.UnixNano() / int64(Bucket)
	j.mu.Lock()
	out := make([]RouteActivity, 0, len(j.routes))
	for id, r := range j.routes {
		a := RouteActivity{Route: id, Session: r.session, InFlight: r.inFlight, Limit: r.limit,
			Totals: maps.Clone(r.totals), Throughput: make([]Point, Buckets)}
		for i := range Buckets {
			slot := cur - Buckets + 1 + int64(i)
			a.Throughput[i] = Point{Start: slotStart(slot)}
			if b := r.buckets[slot%Buckets]; b.Start.Equal(a.Throughput[i].Start) {
				a.Throughput[i] = b
			}
		}
		// The last minute: the current bucket and the five before it.
		var ok, failed int
		for _, p := range a.Throughput[Buckets-6:] {
			ok, failed = ok+p.OK, failed+p.Failed
		}
		a.OKPerSecond, a.FailedPerSecond = float64(ok)/60, float64(failed)/60
		if !r.last.IsZero() {
			a.LastAt = new(r.last)
		}
		out = append(out, a)
	}
	j.mu.Unlock()
	slices.SortFunc(out, func(a, b RouteActivity) int {
		return cmp.Or(cmp.Compare(a.Session, b.Session), cmp.Compare(a.Route, b.Route))
	})
	return out
}

// lastSentAt returns the last successful send of every session.
func (j *Journal) lastSentAt() map[string]time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	return maps.Clone(j.lastSent)
}

// slotStart is the start of throughput bucket slot (unix time / Bucket).
func slotStart(slot int64) time.Time { return time.Unix(0, slot*int64(Bucket)).UTC() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 { // do not cut a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
