package admin

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gobridge/gobridge/redact"
	"github.com/gobridge/gobridge/stores"
)

// Page sizes of the dead-letter endpoints. Lists and bulk calls read no
// payloads (stores.DeadQuery.NoPayload); a bulk call reads the letters it
// changes whole, one at a time.
const (
	DefaultPage = 50
	MaxPage     = 200
	// MaxBulk is the most dead letters one bulk call changes; the caller
	// repeats while the answer says "remaining".
	MaxBulk = 100
)

// DeadLetter is the JSON form of a dead letter (the API and `gobridge dlq`).
type DeadLetter struct {
	ID             string            `json:"id"`
	Session        string            `json:"session"`
	Partition      int               `json:"partition"`
	Route          string            `json:"route"`
	Topic          string            `json:"topic"`
	QoS            byte              `json:"qos"`
	Key            string            `json:"key,omitempty"`
	CausationID    string            `json:"causation_id,omitempty"`
	Reason         string            `json:"reason"`
	LastError      string            `json:"last_error,omitempty"`
	Attempts       int               `json:"attempts"`
	ReceivedAt     time.Time         `json:"received_at,omitzero"`
	CreatedAt      time.Time         `json:"created_at"`
	FirstAttemptAt time.Time         `json:"first_attempt_at,omitzero"`
	DeadAt         time.Time         `json:"dead_at"`
	ExpiresAt      time.Time         `json:"expires_at,omitzero"`
	AgeSeconds     float64           `json:"age_seconds"`
	Headers        map[string]string `json:"headers,omitempty"`
	// PayloadEncoding is "text" (valid UTF-8) or "base64"; it and Payload
	// are set only when the payload was asked for.
	PayloadEncoding string `json:"payload_encoding,omitempty"`
	Payload         string `json:"payload,omitempty"`
	PayloadBytes    int    `json:"payload_bytes"`
}

// NewDeadLetter converts r (a dead record) at now; withPayload adds the
// headers and payload. The reason and last error are redacted (package
// redact): a record dead-lettered by an older version may hold a secret
// from a target URL.
func NewDeadLetter(r *stores.Record, now time.Time, withPayload bool) DeadLetter {
	d := DeadLetter{
		ID: r.Envelope.ID, Session: r.Session, Partition: r.Partition, Route: r.Route,
		Topic: r.Envelope.Topic, QoS: r.Envelope.QoS, Key: r.Envelope.Key, CausationID: r.CausationID,
		Reason: redact.Text(r.DeadReason), LastError: redact.Text(r.LastError), Attempts: r.Attempts,
		ReceivedAt: r.Envelope.ReceivedAt, CreatedAt: r.CreatedAt, FirstAttemptAt: r.FirstAttemptAt,
		DeadAt: r.DeadAt, ExpiresAt: r.ExpiresAt, AgeSeconds: now.Sub(r.CreatedAt).Seconds(),
		PayloadBytes: r.PayloadBytes(),
	}
	if withPayload {
		d.Headers = r.Envelope.Headers
		d.PayloadEncoding, d.Payload = "text", string(r.Envelope.Payload)
		if !utf8.Valid(r.Envelope.Payload) {
			d.PayloadEncoding, d.Payload = "base64", base64.StdEncoding.EncodeToString(r.Envelope.Payload)
		}
	}
	return d
}

// DeadPage is one page of dead letters without payloads, oldest first, as
// GET /api/dead-letters and `gobridge dlq list --format json` show it.
// Next is the cursor of the next page ("" at the end).
type DeadPage struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Next        string       `json:"next"`
}

// NewDeadPage converts a page of dead records (Outbox.Dead, payloads
// read or not) at now.
func NewDeadPage(recs []stores.Record, next string, now time.Time) DeadPage {
	p := DeadPage{DeadLetters: make([]DeadLetter, len(recs)), Next: next}
	for i := range recs {
		p.DeadLetters[i] = NewDeadLetter(&recs[i], now, false)
	}
	return p
}

// withStore returns next, or, when the bridge has no outbox store, a
// handler that answers 404 with an explanation.
func (h *Handler) withStore(next http.HandlerFunc) http.HandlerFunc {
	if h.opts.Store != nil {
		return next
	}
	return func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, http.StatusNotFound, "this bridge has no outbox store (stores.outbox), so it keeps no dead letters")
	}
}

// listDead serves GET /api/dead-letters?route=R&after=CURSOR&limit=N: one
// DeadPage.
func (h *Handler) listDead(w http.ResponseWriter, r *http.Request) {
	limit, ok := intParam(w, r, "limit", DefaultPage, 1, MaxPage)
	if !ok {
		return
	}
	q := r.URL.Query()
	recs, next, err := h.opts.Store.Dead(r.Context(), stores.DeadQuery{Route: q.Get("route"), After: q.Get("after"), Limit: limit, NoPayload: true})
	if err != nil {
		h.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeadPage(recs, next, time.Now()))
}

func (h *Handler) getDead(w http.ResponseWriter, r *http.Request) {
	d, err := stores.FindDead(r.Context(), h.opts.Store, r.PathValue("id"), r.URL.Query().Get("of"))
	if err != nil {
		h.storeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, NewDeadLetter(&d, time.Now(), true))
}

func (h *Handler) requeue(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	n, err := h.opts.Store.Requeue(r.Context(), id, r.URL.Query().Get("of"), r.URL.Query().Get("route"))
	if err != nil {
		h.storeError(w, err)
		return
	}
	h.log.Info("dead letter requeued", "record_id", id, "new_id", n.Envelope.ID, "route", n.Route, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"requeued": id, "id": n.Envelope.ID, "route": n.Route, "session": n.Session})
}

func (h *Handler) drop(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.opts.Store.Drop(r.Context(), id, r.URL.Query().Get("of")); err != nil {
		h.storeError(w, err)
		return
	}
	h.log.Info("dead letter dropped", "record_id", id, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"dropped": id})
}

// bulk serves POST /api/dead-letters/{requeue,drop}?route=R&limit=N&
// after=CURSOR&until=T: it acts on the next N (default and most MaxBulk)
// dead letters of route R (required) after CURSOR, oldest first, that died
// no later than T (Unix nanoseconds; default now). It answers {"done",
// "failed", "remaining", "next", "until"}; callers repeat with after=next
// and until while remaining is true. So each letter is visited once,
// failures included, and letters that die meanwhile (a requeued one that
// fails again) are left for the operator to see.
func (h *Handler) bulk(w http.ResponseWriter, r *http.Request) {
	verb := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	q := r.URL.Query()
	route := q.Get("route")
	if route == "" {
		writeError(w, http.StatusBadRequest, "bulk "+verb+" needs ?route=R")
		return
	}
	limit, ok := intParam(w, r, "limit", MaxBulk, 1, MaxBulk)
	if !ok {
		return
	}
	until := time.Now().UnixNano()
	if s := q.Get("until"); s != "" {
		var err error
		if until, err = strconv.ParseInt(s, 10, 64); err != nil {
			writeError(w, http.StatusBadRequest, "until must be Unix nanoseconds, as a bulk answer gives it")
			return
		}
	}
	ctx := r.Context()
	recs, next, err := h.opts.Store.Dead(ctx, stores.DeadQuery{Route: route, After: q.Get("after"), Limit: limit, NoPayload: true})
	if err != nil {
		h.storeError(w, err)
		return
	}
	done, failed := 0, []string{}
	for i := range recs {
		if recs[i].DeadAt.UnixNano() > until {
			next = ""
			break
		}
		id := recs[i].Envelope.ID
		if verb == "requeue" {
			_, err = h.opts.Store.Requeue(ctx, id, route, "")
		} else {
			err = h.opts.Store.Drop(ctx, id, route)
		}
		if err != nil {
			failed = append(failed, id+": "+err.Error())
			if ctx.Err() != nil {
				break
			}
			continue
		}
		done++
	}
	h.log.Info("dead letters "+verb+" in bulk", "route", route, "count", done, "failed", len(failed), "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, map[string]any{"done": done, "failed": failed, "remaining": next != "", "next": next,
		"until": strconv.FormatInt(until, 10)})
}

// intParam reads query parameter name (def when absent), answering 400 and
// false when it is not an integer in [lo, hi].
func intParam(w http.ResponseWriter, r *http.Request, name string, def, lo, hi int) (int, bool) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		writeError(w, http.StatusBadRequest, name+" must be an integer from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
		return 0, false
	}
	return n, true
}
