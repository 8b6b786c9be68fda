package sqlite

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/delivery"
	"github.com/gobridge/gobridge/stores"
)

// TestStore_AppendDeadReportsFullDisk caps the database size so that
// AppendDead hits SQLITE_FULL: the caller gets stores.ErrFull and the failed
// batch is absent as a whole.
func TestStore_AppendDeadReportsFullDisk(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "outbox.db"), Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.w.Exec(`PRAGMA max_page_count = 64`); err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	const batch = 10
	payload := make([]byte, 500)
	appended := 0
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("AppendDead never failed with a capped database")
		}
		recs := make([]stores.Record, batch)
		for j := range recs {
			recs[j] = stores.Record{Session: "s", Route: "r", Envelope: delivery.Envelope{
				ID: delivery.NewID(), Topic: "t", Payload: payload, ReceivedAt: t0,
			}, CreatedAt: t0, DeadReason: "processor"}
		}
		err := s.AppendDead(t.Context(), recs...)
		if err == nil {
			appended += batch
			continue
		}
		if !errors.Is(err, stores.ErrFull) {
			t.Fatalf("AppendDead on a full database = %v, want ErrFull", err)
		}
		break
	}
	var rows, dead int
	if err := s.r.QueryRow(`SELECT count(*), coalesce(sum(state = 'dead'), 0) FROM outbox`).Scan(&rows, &dead); err != nil {
		t.Fatal(err)
	}
	if rows != appended || dead != appended {
		t.Errorf("outbox has %d rows, %d dead; want %d, all dead", rows, dead, appended)
	}
	var depth int
	if err := s.r.QueryRow(`SELECT count(*) FROM depth`).Scan(&depth); err != nil {
		t.Fatal(err)
	}
	if depth != 0 {
		t.Errorf("depth has %d rows, want none (dead letters are not live)", depth)
	}
}
