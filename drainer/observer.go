package drainer

import "time"

// Outcome results, as reported to the Observer. Send results use the
// senders' vocabulary (ok, capacity, transient, permanent); the rest say how
// a record was settled without a send, or after a permanent failure.
const (
	ResultOK           = "ok"            // the target accepted the record: done
	ResultCapacity     = "capacity"      // the target is saturated: retried after backoff or its retry-after
	ResultTransient    = "transient"     // a transient failure: retried with backoff
	ResultDeadLettered = "dead_lettered" // a permanent failure (on_permanent_failure: dlq), poisoned, or a processor error
	ResultDropped      = "dropped"       // a permanent failure with on_permanent_failure: drop
	ResultExpired      = "expired"       // past its TTL: dead-lettered or dropped per on_expired
	ResultFiltered     = "filtered"      // a requeued ingest dead letter that the route's processors filtered out
	ResultCoalesced    = "coalesced"     // replaced by a newer record of its coalesce key
	ResultHeld         = "held"          // would have died, but the route holds max_dead_letters: retried later
	ResultStale        = "stale"         // sent after the lease was lost: not recorded, the next owner sends it again
)

// Outcome is what happened to one record after a send (or instead of one).
type Outcome struct {
	Session   string
	Route     string
	ID        string
	Partition int
	// Result is one of the Result* constants.
	Result string
	// Attempt is the record's send count so far.
	Attempt int
	// Err is the send error or the settlement reason; "" on success.
	Err string
	// Latency is how long the send took (zero when nothing was sent).
	Latency time.Duration
	At      time.Time
}

// Observer receives the drainer's events; the bridge wires it to Prometheus
// and to its delivery journal. Methods are called from drainer goroutines
// and must not block.
type Observer interface {
	// Delivered reports the settlement (or retry) of one record.
	Delivered(Outcome)
	// Limit reports a route's new AIMD concurrency limit.
	Limit(route string, limit int)
	// InFlight reports a route's number of sends in flight.
	InFlight(route string, n int)
	// Sent reports a successful send on a session (for stall detection).
	Sent(session string, at time.Time)
	// Abandoned counts a send that ignored its context past send_timeout.
	Abandoned(route string)
}

type nopObserver struct{}

func (nopObserver) Delivered(Outcome)      {}
func (nopObserver) Limit(string, int)      {}
func (nopObserver) InFlight(string, int)   {}
func (nopObserver) Sent(string, time.Time) {}
func (nopObserver) Abandoned(string)       {}
