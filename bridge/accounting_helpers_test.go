package bridge

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gobridge/gobridge/admin"
)

// The helpers of TestRun_AccountingOfAHostileMixAcrossAKill: the seeded
// plan of messages, the sink that answers each message by its kind, and
// readers of the admin API's dead letters and of /metrics.

// acctKind is what a message of the mix is, and so what must become of it.
type acctKind string

const (
	kindOK      acctKind = "ok"      // delivered
	kindLong    acctKind = "long"    // a 3 KB topic: delivered
	kindFlaky   acctKind = "flaky"   // the sink answers 500, then 204: delivered
	kindSlow    acctKind = "slow"    // the sink answers after 50 ms (within send_timeout): delivered
	kindStuck   acctKind = "stuck"   // the sink hangs on the first send until the sender gives up, then 204: delivered
	kindEdge    acctKind = "edge"    // a payload of exactly max_payload_bytes: delivered
	kindSkip    acctKind = "skip"    // the filter drops it: filtered
	kindBadKeep acctKind = "badkeep" // the filter's result is no boolean: dead letter
	kindBig     acctKind = "big"     // over max_payload_bytes: dead letter
	kindBadJSON acctKind = "badjson" // not JSON: idempotency_key fails, dead letter
	kindNotUTF8 acctKind = "notutf8" // not UTF-8: dead letter
	kindDupName acctKind = "dupname" // an object with a name twice: dead letter
	kindNoID    acctKind = "noid"    // no payload.id: dead letter
	kindNoKey   acctKind = "nokey"   // no payload.k: the ordering key fails, dead letter
	kindPerm    acctKind = "perm400" // the sink answers 400: dead letter
	kindPoison  acctKind = "poison"  // the sink always answers 500: poisoned, dead letter
)

// acctMix is each kind with its weight in the mix.
var acctMix = []struct {
	kind   acctKind
	weight int
}{
	{kindOK, 50}, {kindLong, 3}, {kindFlaky, 8}, {kindSlow, 4}, {kindStuck, 2}, {kindEdge, 2}, {kindSkip, 8}, {kindBadKeep, 2},
	{kindBig, 3}, {kindBadJSON, 3}, {kindNotUTF8, 2}, {kindDupName, 3}, {kindNoID, 2},
	{kindNoKey, 2}, {kindPerm, 6}, {kindPoison, 2},
}

// acctReason is what a dead letter's reason must hold to name its cause;
// kinds without one must not be dead-lettered.
var acctReason = map[acctKind][]string{
	kindBig:     {"payload_too_large: ", " bytes, sha256 "},
	kindBadJSON: {"(idempotency_key): placeholder {payload.id}: payload is not JSON: "},
	kindNotUTF8: {"(idempotency_key): placeholder {payload.id}: payload is not JSON: not valid UTF-8"},
	kindDupName: {"(idempotency_key): placeholder {payload.id}: payload is not JSON: an object has a name twice"},
	kindNoID:    {`(idempotency_key): placeholder {payload.id}: field "id" missing`},
	kindBadKeep: {"(filter): evaluate "},
	kindNoKey:   {"ordering_key: placeholder {payload.k}: "},
	kindPerm:    {"permanent: ", "status 400 Bad Request"},
	// The poison rule waits for another delivery since the first attempt
	// (DESIGN.md §11.3), so a record may be sent more than 3 times.
	kindPoison: {"poisoned after ", "status 500 Internal Server Error"},
}

func (k acctKind) delivered() bool {
	switch k {
	case kindOK, kindLong, kindFlaky, kindSlow, kindStuck, kindEdge:
		return true
	}
	return false
}

// acctMsg is one message of the plan. Its ID is the topic's last segment
// (so every dead letter names its message) and, where the payload allows,
// payload.id (the envelope ID by idempotency_key, the sink's
// Idempotency-Key).
type acctMsg struct {
	id, topic string
	kind      acctKind
	payload   []byte
}

// acctPlan is n messages drawn from acctMix by seed.
func acctPlan(seed uint64, n, maxPayload int) []acctMsg {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	total := 0
	for _, m := range acctMix {
		total += m.weight
	}
	msgs := make([]acctMsg, n)
	for i := range msgs {
		w := rng.IntN(total)
		var kind acctKind
		for _, m := range acctMix {
			if w -= m.weight; w < 0 {
				kind = m.kind
				break
			}
		}
		id := fmt.Sprintf("a-%05d", i)
		key := fmt.Sprintf("k%d", rng.IntN(16))
		m := acctMsg{id: id, kind: kind, topic: "acct/" + string(kind) + "/" + id}
		switch kind {
		case kindLong:
			m.topic = "acct/long/" + strings.Repeat("x", 3000) + "/" + id
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q}`, id, key)
		case kindEdge:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"pad":""}`, id, key)
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"pad":%q}`, id, key, strings.Repeat("e", maxPayload-len(m.payload)))
		case kindSkip:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"keep":false}`, id, key)
		case kindBadKeep:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"keep":"maybe"}`, id, key)
		case kindBig:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"pad":%q}`, id, key, strings.Repeat("p", maxPayload+rng.IntN(1000)))
		case kindBadJSON:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q`, id, key)
		case kindNotUTF8:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"v":"`+"\xff\xfe"+`"}`, id, key)
		case kindDupName:
			m.payload = fmt.Appendf(nil, `{"id":%q,"id":%q,"k":%q}`, id, id+"-b", key)
		case kindNoID:
			m.payload = fmt.Appendf(nil, `{"ref":%q,"k":%q}`, id, key)
		case kindNoKey:
			m.payload = fmt.Appendf(nil, `{"id":%q}`, id)
		default:
			m.payload = fmt.Appendf(nil, `{"id":%q,"k":%q,"mode":%q}`, id, key, kind)
		}
		msgs[i] = m
	}
	return msgs
}

// acctHeartbeats are n messages of kind ok on a key of their own.
func acctHeartbeats(n int) []acctMsg {
	hbs := make([]acctMsg, n)
	for i := range hbs {
		id := fmt.Sprintf("h-%05d", i)
		hbs[i] = acctMsg{id: id, kind: kindOK, topic: "acct/ok/" + id, payload: fmt.Appendf(nil, `{"id":%q,"k":"hb"}`, id)}
	}
	return hbs
}

// acctSink is the HTTP target: it answers each request by the kind of the
// message its Idempotency-Key names, and records per run (the X-Run header
// the config of each process sets) the requests and the deliveries (2xx
// answers to a request whose sender was still waiting).
type acctSink struct {
	srv   *httptest.Server
	kinds map[string]acctKind // read-only once serving
	stop  chan struct{}       // closed at cleanup: releases stuck requests

	mu        sync.Mutex
	attempts  map[string]int            // id -> requests
	delivered map[string]map[string]int // id -> run -> 2xx answers
	requests  map[string]int            // run -> requests
	ok        map[string]int            // run -> 2xx answers
	unknown   []string                  // Idempotency-Keys of no published message
}

func newAcctSink(t *testing.T, msgs []acctMsg) *acctSink {
	s := &acctSink{
		kinds: map[string]acctKind{}, stop: make(chan struct{}),
		attempts: map[string]int{}, delivered: map[string]map[string]int{},
		requests: map[string]int{}, ok: map[string]int{},
	}
	for _, m := range msgs {
		s.kinds[m.id] = m.kind
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	t.Cleanup(func() { close(s.stop) }) // runs before Close
	return s
}

func (s *acctSink) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	id, run := r.Header.Get("Idempotency-Key"), r.Header.Get("X-Run")
	kind, known := s.kinds[id]
	s.mu.Lock()
	s.attempts[id]++
	attempt := s.attempts[id]
	s.requests[run]++
	if !known {
		s.unknown = append(s.unknown, id)
	}
	s.mu.Unlock()
	switch {
	case kind == kindPerm:
		http.Error(w, "bad message", http.StatusBadRequest)
		return
	case kind == kindPoison, kind == kindFlaky && attempt == 1:
		http.Error(w, "failing", http.StatusInternalServerError)
		return
	case kind == kindStuck && attempt == 1:
		select { // until the sender gives up (send_timeout)
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	case kind == kindSlow:
		select {
		case <-time.After(50 * time.Millisecond): // a slow target, not synchronisation
		case <-r.Context().Done():
			return
		}
	}
	if r.Context().Err() != nil {
		return // the sender gave up: not a delivery
	}
	s.mu.Lock()
	if s.delivered[id] == nil {
		s.delivered[id] = map[string]int{}
	}
	s.delivered[id][run]++
	s.ok[run]++
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// deliveredCount returns how many messages the sink took at least once.
func (s *acctSink) deliveredCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.delivered)
}

// deadLetters reads every dead letter of route through the admin API at
// addr, page by page.
func deadLetters(t *testing.T, addr, route string) []admin.DeadLetter {
	t.Helper()
	var all []admin.DeadLetter
	after := ""
	for {
		code, body := httpGet(t, fmt.Sprintf("http://%s/api/dead-letters?route=%s&limit=%d&after=%s", addr, route, admin.MaxPage, after))
		if code != http.StatusOK {
			t.Fatalf("GET /api/dead-letters: %d %s", code, body)
		}
		var page admin.DeadPage
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("decode dead letters: %v", err)
		}
		all = append(all, page.DeadLetters...)
		if page.Next == "" {
			return all
		}
		after = page.Next
	}
}

// metricSum scrapes /metrics at addr and returns the sum of the samples of
// name whose labels contain every one of labels (`route="r"`).
func metricSum(t *testing.T, addr, name string, labels ...string) float64 {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if !match {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// acctLive returns the live records of the outbox (GET /api/stats).
func acctLive(t *testing.T, addr string) int {
	t.Helper()
	code, body := httpGet(t, "http://"+addr+"/api/stats")
	var stats struct {
		Routes []struct{ Live int } `json:"routes"`
	}
	if err := json.Unmarshal([]byte(body), &stats); code != 200 || err != nil {
		t.Fatalf("GET /api/stats: %d %v %s", code, err, body)
	}
	live := 0
	for _, r := range stats.Routes {
		live += r.Live
	}
	return live
}

// acctKindOf returns the kind a topic names (acct/KIND/.../ID).
func acctKindOf(topic string) acctKind {
	parts := strings.Split(topic, "/")
	if len(parts) < 3 {
		return ""
	}
	return acctKind(parts[1])
}
