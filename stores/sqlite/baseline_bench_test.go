package sqlite_test

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkBaseline_BareInsert is the calibration for BenchmarkStore_Append:
// the infra report's probe (a rowid table, no secondary index, one prepared
// INSERT per row, batch rows per transaction) on this machine at this
// moment, so that the store's numbers can be read as a fraction of what the
// disk and CPU give when the machine is shared and noisy.
func BenchmarkBaseline_BareInsert(b *testing.B) {
	for _, sync := range []string{"full", "normal"} {
		for _, batch := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("sync=%s/batch=%d", sync, batch), func(b *testing.B) {
				path := filepath.Join(b.TempDir(), "bare.db")
				db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+sync+
					")&_pragma=busy_timeout(5000)&_txlock=immediate")
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				db.SetMaxOpenConns(1)
				if _, err := db.Exec(`CREATE TABLE outbox (id INTEGER PRIMARY KEY AUTOINCREMENT, topic TEXT,
					payload BLOB, state TEXT, owner TEXT, lease_until INTEGER, next_at INTEGER, attempts INTEGER,
					created_at INTEGER)`); err != nil {
					b.Fatal(err)
				}
				ins, err := db.Prepare(`INSERT INTO outbox (topic, payload, state, owner, lease_until, next_at,
					attempts, created_at) VALUES (?, ?, 'pending', '', 0, 0, 0, 0)`)
				if err != nil {
					b.Fatal(err)
				}
				payload := make([]byte, 200)
				b.ResetTimer()
				for range b.N {
					tx, err := db.Begin()
					if err != nil {
						b.Fatal(err)
					}
					st := tx.Stmt(ins)
					for range batch {
						if _, err := st.Exec("factory/1/telemetry", payload); err != nil {
							b.Fatal(err)
						}
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rec/s")
			})
		}
	}
}
