package bridge

import (
	"context"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
)

// TestAdmission_ARefreshKeepsWhatIsAdmittedAndNotWritten: a refresh that
// reads the store between a record's admission and its write must not
// forget the record (direct_or_outbox reads the count to decide whether a
// key's later messages may go direct).
func TestAdmission_ARefreshKeepsWhatIsAdmittedAndNotWritten(t *testing.T) {
	var stored []stores.SessionStats
	a := newAdmission(func(context.Context) ([]stores.SessionStats, error) { return stored, nil })
	r := &route{id: "r"}
	r.cfg.Policy.MaxDeadLetters = 10
	a.configure(&parts{sessions: map[string]*session{"s": {id: "s", sessionSettings: sessionSettings{maxLive: 10, maxBytes: 1 << 20}}},
		routes: []*route{r}})
	rec := stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: "1", Payload: []byte("p")}}
	dead := rec
	dead.State, dead.DeadReason = stores.Dead, "x"
	if !a.admit(t.Context(), &rec, nil) || !a.admit(t.Context(), &dead, nil) {
		t.Fatal("no room")
	}
	a.refresh(t.Context(), false) // the store does not hold them yet
	if a.live("s") != 1 || a.routes["r"].n != 1 {
		t.Fatalf("after a refresh before the write: live %d, dead %d; want 1, 1", a.live("s"), a.routes["r"].n)
	}
	stored = []stores.SessionStats{{Session: "s", Live: 1, Bytes: rec.Size(), Routes: map[string]stores.RouteCounts{"r": {Live: 1, Dead: 1}}}}
	a.written(&rec, &rec)
	a.written(&dead, &dead)
	a.refresh(t.Context(), false)
	if a.live("s") != 1 || a.routes["r"].n != 1 || a.sessions["s"].bytes != rec.Size() {
		t.Fatalf("after the write: live %d, dead %d, bytes %d", a.live("s"), a.routes["r"].n, a.sessions["s"].bytes)
	}
}
