package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// delivery is one request the sink accepted.
type delivery struct {
	key     string // Idempotency-Key (the envelope ID)
	body    string
	headers http.Header
}

// sink is an HTTP target that records what it accepted and can be switched
// down (503 with a Retry-After) and up.
type sink struct {
	srv        *httptest.Server
	down       atomic.Bool
	retryAfter string
	refused    atomic.Int64 // requests answered 503
	// reject, when non-zero, is the status every request gets (with a body
	// naming it); rejected counts them.
	reject   atomic.Int32
	rejected atomic.Int64

	// holdFrom, when set, names an X-Instance whose requests wait until
	// release is closed (then succeed); held counts them.
	holdFrom    atomic.Value // string
	held        atomic.Int64
	release     chan struct{}
	releaseOnce sync.Once

	mu       sync.Mutex
	got      []delivery
	byKey    map[string]int
	refusals []refusal // the 503s, in order
}

// refusal is one request the sink answered 503, and when.
type refusal struct {
	at   time.Time
	body string
}

func newSink(t testing.TB) *sink {
	t.Helper()
	s := &sink{byKey: map[string]int{}, retryAfter: "1", release: make(chan struct{})}
	s.holdFrom.Store("")
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if h := s.holdFrom.Load().(string); h != "" && r.Header.Get("X-Instance") == h {
			s.held.Add(1)
			select {
			case <-s.release:
			case <-r.Context().Done():
				return
			}
		}
		if code := s.reject.Load(); code != 0 {
			s.rejected.Add(1)
			w.WriteHeader(int(code))
			w.Write([]byte("rejected by the e2e sink"))
			return
		}
		if s.down.Load() {
			s.mu.Lock()
			s.refusals = append(s.refusals, refusal{time.Now(), string(body)})
			s.mu.Unlock()
			s.refused.Add(1)
			w.Header().Set("Retry-After", s.retryAfter)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		d := delivery{key: r.Header.Get("Idempotency-Key"), body: string(body), headers: r.Header.Clone()}
		s.mu.Lock()
		s.got = append(s.got, d)
		s.byKey[d.key]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(func() {
		s.releaseHeld()
		s.srv.Close()
	})
	return s
}

// releaseHeld lets every held request (and later ones) through.
func (s *sink) releaseHeld() { s.releaseOnce.Do(func() { close(s.release) }) }

// deliveries returns a copy of everything accepted so far, in arrival order.
func (s *sink) deliveries() []delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]delivery(nil), s.got...)
}

// refused503 returns a copy of the 503s answered so far, in order.
func (s *sink) refused503() []refusal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]refusal(nil), s.refusals...)
}

// counts returns the number of accepted requests and of distinct keys.
func (s *sink) counts() (total, distinct int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got), len(s.byKey)
}
