package drainer

import "time"

// Outcome results, as reported to the Observer.
const (
	ResultOK           = "ok"            // the target accepted the record; completed
	ResultRetried      = "retried"       // transient failure; released with backoff
	ResultCapacity     = "capacity"      // capacity error; released after backoff or retry-after
	ResultDeadLettered = "dead_lettered" // permanent failure (on_permanent_failure: dlq) or poisoned
	ResultDropped      = "dropped"       // permanent failure with on_permanent_failure: drop
	ResultExpired      = "expired"       // past its TTL; dead-lettered or dropped per on_expired
	ResultStale        = "stale"         // the store refused the state change (lease lost, token stale)
)

// Outcome is what happened to one record after a send (or instead of one).
type Outcome struct {
	Session   string
	Route     string
	ID        string
	Partition int
	// Result is one of the Result* constants.
	Result string
	// Attempt is the record's claim count (stores.Record.Attempts).
	Attempt int
	// Err is the send error or the dead-letter reason; "" on success.
	Err string
	// Latency is how long the send took (zero when nothing was sent).
	Latency time.Duration
	At      time.Time
}

// Observer receives the drainer's events; the bridge wires it to Prometheus
// and to its delivery journal. Methods are called from drainer goroutines
// and must not block.
type Observer interface {
	// Delivered reports the settlement of one record.
	Delivered(Outcome)
	// Limit reports a route's new AIMD concurrency limit.
	Limit(route string, limit int)
	// InFlight reports a route's number of sends in flight.
	InFlight(route string, n int)
	// Sent reports a successful send on a session (for stall detection).
	Sent(session string, at time.Time)
}

// AbandonObserver is optionally implemented by an Observer to count sends
// that ignored their context past send_timeout and were abandoned.
type AbandonObserver interface {
	Abandoned(route string)
}

type nopObserver struct{}

func (nopObserver) Delivered(Outcome)      {}
func (nopObserver) Limit(string, int)      {}
func (nopObserver) InFlight(string, int)   {}
func (nopObserver) Sent(string, time.Time) {}
