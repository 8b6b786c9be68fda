package admin

import (
	"net/http"
	"time"
)

// Timeouts are the admin server's bounds on a slow or stalled client.
type Timeouts struct {
	// ReadHeader and Read bound the arrival of a request's headers and of
	// the whole request; Idle bounds a keep-alive connection between
	// requests.
	ReadHeader, Read, Idle time.Duration
	// Answer bounds the writing of an answer, from its first byte: a
	// client that does not read it is disconnected then. It does not bound
	// the work before the answer (a reload that waits for routes to
	// settle), as a server WriteTimeout would.
	Answer time.Duration
}

// DefaultTimeouts are the admin listener's.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Idle: 2 * time.Minute, Answer: 30 * time.Second}

// NewServer returns the admin listener's server for h (the bridge's mux:
// /healthz, /readyz, /metrics and a Handler) with the bounds of t.
func NewServer(h http.Handler, t Timeouts) *http.Server {
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&answerWriter{ResponseWriter: w, rc: http.NewResponseController(w), within: t.Answer}, r)
	})
	return &http.Server{Handler: answer, ReadHeaderTimeout: t.ReadHeader, ReadTimeout: t.Read, IdleTimeout: t.Idle}
}

// answerWriter sets the connection's write deadline when the answer
// begins. net/http clears it once the answer is flushed (after the
// handler returns, so that flush is bounded too).
type answerWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	within  time.Duration
	started bool
}

func (w *answerWriter) begin() {
	if !w.started {
		w.started = true
		_ = w.rc.SetWriteDeadline(time.Now().Add(w.within))
	}
}

func (w *answerWriter) WriteHeader(code int) {
	w.begin()
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	w.begin()
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
