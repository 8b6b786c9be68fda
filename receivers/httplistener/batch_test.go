package httplistener

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/gobridge/gobridge/receivers"
)

type batchAnswer struct {
	Results []result `json:"results"`
}

func postBatch(t *testing.T, url, body string) (int, batchAnswer, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a batchAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, a, resp.Header
}

func TestReceiver_BatchAnswersEachLine(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, false)
	b := setup(t, Options{MaxPayloadBytes: 16, MaxBatchBytes: 4096}, sink)
	body := strings.Join([]string{
		`{"topic":"plant/a","payload":{"t": 1}}`,
		`{"topic":"plant/b","payload_base64":"` + base64.StdEncoding.EncodeToString([]byte{0, 1, 2}) + `","idempotency_key":"k-b"}`,
		`not json`,
		``, // blank lines are skipped, numbering is kept
		`{"topic":"office/x","payload":1}`,
		`{"topic":"plant/+","payload":1}`,
		`{"topic":"plant/c","payload":"` + strings.Repeat("x", 20) + `"}`,
		`{"topic":"plant/d","payload":1,"payload_base64":"AA=="}`,
		`{"topic":"plant/e","payload":1,"qos":2}`,
		`{"topic":"plant/f","payload":"quoted"} {"topic":"plant/g","payload":2}`,
		`{"topic":"plant/h","payload":null}` + "\r",
	}, "\n") + "\n"
	st, a, _ := postBatch(t, b.url, body)
	if st != http.StatusOK {
		t.Fatalf("status %d", st)
	}
	want := []struct {
		line, status int
	}{{1, 200}, {2, 200}, {3, 400}, {5, 403}, {6, 400}, {7, 413}, {8, 400}, {9, 400}, {10, 400}, {11, 200}}
	if len(a.Results) != len(want) {
		t.Fatalf("results = %+v", a.Results)
	}
	for i, w := range want {
		r := a.Results[i]
		if r.Line != w.line || r.Status != w.status {
			t.Errorf("result %d = %+v, want line %d status %d", i, r, w.line, w.status)
		}
		if (r.Status == 200) != (r.Outcome == receivers.OutcomeCommitted && r.ID != "") || (r.Status != 200) == (r.Error == "") {
			t.Errorf("result %d = %+v", i, r)
		}
	}
	if a.Results[1].ID != EnvelopeID("web", "plant/b", "k-b") {
		t.Errorf("line 2 id %q", a.Results[1].ID)
	}
	got := []receivers.Message{<-sink.got, <-sink.got, <-sink.got}
	if string(got[0].Payload) != `{"t": 1}` || got[0].Headers["Content-Type"] != "application/json" ||
		string(got[1].Payload) != "\x00\x01\x02" || got[1].Headers["Content-Type"] != "" || string(got[2].Payload) != "null" {
		t.Fatalf("messages = %+v", got)
	}
	if len(sink.got) != 0 {
		t.Fatalf("%d more messages", len(sink.got))
	}
	if s := b.r.Stats(); s.Received != 3 || s.Acked != 3 || s.Malformed != 5 || s.Denied != 1 || s.TooLarge != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestReceiver_BatchLimits(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, false)
	b := setup(t, Options{MaxBatchLines: 3, MaxBatchBytes: 1024}, sink)
	line := `{"topic":"plant/a","payload":1}` + "\n"
	if st, a, _ := postBatch(t, b.url, strings.Repeat(line, 3)); st != 200 || len(a.Results) != 3 {
		t.Fatalf("3 lines: %d %+v", st, a)
	}
	if st, _, _ := postBatch(t, b.url, strings.Repeat(line, 4)); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("4 lines: %d", st)
	}
	if st, _, _ := postBatch(t, b.url, `{"topic":"plant/a","payload":"`+strings.Repeat("x", 1024)+`"}`); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("over max_batch_bytes: %d", st)
	}
	if len(sink.got) != 3 {
		t.Fatalf("%d messages reached the sink", len(sink.got))
	}
}

func TestReceiver_BatchLinesNotSettledAre503(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, true)
	b := setup(t, Options{SettleTimeout: 200_000_000}, sink)
	sink.release <- struct{}{} // only the first line settles
	var body strings.Builder
	for i := range 3 {
		fmt.Fprintf(&body, `{"topic":"plant/%d","payload":%d,"idempotency_key":"k%d"}`+"\n", i, i, i)
	}
	st, a, h := postBatch(t, b.url, body.String())
	if st != 200 || len(a.Results) != 3 || h.Get("Retry-After") == "" {
		t.Fatalf("answer %d %+v", st, a)
	}
	settled := 0
	for i, r := range a.Results {
		switch r.Status {
		case 200:
			settled++
		case 503:
			if r.ID != EnvelopeID("web", fmt.Sprintf("plant/%d", i), fmt.Sprintf("k%d", i)) {
				t.Errorf("503 line %d without its id: %+v", i+1, r)
			}
		default:
			t.Errorf("line %d: %+v", i+1, r)
		}
	}
	if settled != 1 {
		t.Fatalf("results = %+v", a.Results)
	}
}

// serverAlloc posts body as a batch and returns the answer's status, its
// raw bytes and the bytes the process allocated meanwhile (the test runs
// alone: parallel tests wait for it).
func serverAlloc(t *testing.T, url, body string) (int, []byte, uint64) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/x-ndjson")
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	return resp.StatusCode, raw, after.TotalAlloc - before.TotalAlloc
}

// TestReceiver_BatchOfManyLinesCostsItsSize: a batch body of max_batch_bytes
// made of blank or tiny lines is answered (200 with no results, 413 over
// max_batch_lines) with a few times its size allocated: splitting the body
// into all its lines first allocated 104 MiB for 4 MiB of newlines and 393
// MiB for 4 MiB of "1\n".
func TestReceiver_BatchOfManyLinesCostsItsSize(t *testing.T) {
	b := setup(t, Options{}, newSettlingSink(receivers.OutcomeCommitted, false))
	for _, c := range []struct {
		name, body string
		status     int
	}{
		{"blank lines", strings.Repeat("\n", DefaultMaxBatchBytes), http.StatusOK},
		{"crlf lines", strings.Repeat(" \r\n", DefaultMaxBatchBytes/3), http.StatusOK},
		{"tiny lines", strings.Repeat("1\n", DefaultMaxBatchBytes/2), http.StatusRequestEntityTooLarge},
	} {
		st, raw, alloc := serverAlloc(t, b.url, c.body)
		if st != c.status {
			t.Errorf("%s: %d %s, want %d", c.name, st, raw, c.status)
		}
		if alloc > 6*DefaultMaxBatchBytes {
			t.Errorf("%s: a batch of %d bytes allocated %d MiB", c.name, len(c.body), alloc>>20)
		}
	}
}

// TestReceiver_BatchErrorsAreClipped: an answer quotes what the client sent
// (a topic, an unknown field) in at most MaxErrorText bytes a line, so a
// batch of 1000 lines with 4 KiB of invalid UTF-8 in a field name (quoted
// as \xff, five bytes each in JSON) is not answered with 20 MiB.
func TestReceiver_BatchErrorsAreClipped(t *testing.T) {
	b := setup(t, Options{}, newSettlingSink(receivers.OutcomeCommitted, false))
	var body strings.Builder
	for range 500 {
		body.WriteString(`{"` + strings.Repeat("\xff", 4000) + `":1}` + "\n")
		body.WriteString(`{"topic":"other/` + strings.Repeat("\u2028", 1300) + `","payload":1}` + "\n")
	}
	st, raw, _ := serverAlloc(t, b.url, body.String())
	var a batchAnswer
	if err := json.Unmarshal(raw, &a); st != http.StatusOK || err != nil || len(a.Results) != 1000 {
		t.Fatalf("%d, %d results, %v", st, len(a.Results), err)
	}
	for _, r := range a.Results {
		if len(r.Error) > MaxErrorText || (r.Status != 400 && r.Status != 403) {
			t.Fatalf("line %d: status %d, error of %d bytes", r.Line, r.Status, len(r.Error))
		}
	}
	if len(raw) > 1000*(MaxErrorText+100) {
		t.Fatalf("a batch of %d bytes answered with %d bytes", body.Len(), len(raw))
	}
}

// TestReceiver_BatchLineWithTextAfterItsObjectFails: a line is one JSON
// object (README: "one JSON object a line"; ParseLine: "anything after the
// object" is an error). Text after the object that is no JSON value (a
// stray brace, two objects glued by garbage, a truncated second object)
// passed: only a second valid value was refused.
func TestReceiver_BatchLineWithTextAfterItsObjectFails(t *testing.T) {
	t.Parallel()
	sink := newSettlingSink(receivers.OutcomeCommitted, false)
	b := setup(t, Options{}, sink)
	lines := []string{
		`{"topic":"plant/a","payload":1}}`,
		`{"topic":"plant/a","payload":2} x`,
		`{"topic":"plant/a","payload":3}{"topic":"plant/b","pay`,
		`{"topic":"plant/a","payload":4}, {"topic":"plant/b","payload":5}`,
		`{"topic":"plant/a","payload":6} `, // trailing white space is no text
	}
	st, a, _ := postBatch(t, b.url, strings.Join(lines, "\n"))
	if st != http.StatusOK || len(a.Results) != len(lines) {
		t.Fatalf("answer %d %+v", st, a)
	}
	for i, r := range a.Results {
		if want := map[bool]int{true: 200, false: 400}[i == len(lines)-1]; r.Status != want {
			t.Errorf("line %d (%s): %+v, want status %d", i+1, lines[i], r, want)
		}
	}
}
