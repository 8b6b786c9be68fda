package sqlite

import (
	"testing"

	"github.com/gobridge/gobridge/stores"
)

// TestStore_AppendDeadReportsFullDisk: AppendDead on a full database
// reports stores.ErrFull and the failed batch is absent as a whole.
func TestStore_AppendDeadReportsFullDisk(t *testing.T) {
	s := fullStore(t)
	appended := fillUntilFull(t, func(recs ...stores.Record) error { return s.AppendDead(t.Context(), recs...) },
		func(id string) stores.Record {
			r := fullRecord(id)
			r.DeadReason = "processor"
			return r
		})
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
