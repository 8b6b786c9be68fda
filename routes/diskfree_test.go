package routes_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// diskWarned reports whether check warns about the disk of a SQLite outbox
// in dir for one session with the limits bytes and depth.
func diskWarned(t *testing.T, dir string, bytes, depth uint64) bool {
	t.Helper()
	cfg := fmt.Sprintf(`version: 1
bridge: {id: test}
stores: {outbox: {type: sqlite, options: {path: "%s/sub/outbox.db"}}}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: r, receiver: edge, topic: "#", sender: out, delivery_mode: shared_outbox, session: {id: s}, policy: {max_outbox_bytes: %d, max_outbox_depth: %d}}
`, dir, bytes, depth)
	_, probs, err := routes.ParseWithEnv(strings.NewReader(cfg), "t.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		if p.Rule == "disk-space" {
			return true
		}
	}
	return false
}

// A SQLite outbox on a filesystem with less room than its sessions' limits
// is a warning (DESIGN.md §11.8): a disk cannot hold an outage sized at
// 1,000 TiB, and holds one of 1 KiB.
func TestCheck_WarnsWhenTheDiskCannotHoldTheOutboxLimits(t *testing.T) {
	dir := t.TempDir()
	if !diskWarned(t, dir, 1<<50, 1000) {
		t.Error("no disk-space warning for max_outbox_bytes of 1,000 TiB")
	}
	if diskWarned(t, dir, 1024, 1000) {
		t.Error("a disk-space warning for max_outbox_bytes of 1 KiB")
	}
}

// The warning counts what SQLite takes beyond max_outbox_bytes: a session
// whose limit is half the free space may fill more than all of it (records
// just over half a page take a page), and so may max_outbox_depth records
// of a few bytes each.
func TestCheck_DiskSpaceCountsSQLiteOverhead(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := st.Bavail * uint64(st.Bsize)
	if !diskWarned(t, dir, free/2, 1000) {
		t.Errorf("no disk-space warning for max_outbox_bytes of half the %d bytes free", free)
	}
	if !diskWarned(t, dir, 1024, free/150) {
		t.Errorf("no disk-space warning for max_outbox_depth of %d records on %d bytes free", free/150, free)
	}
}

// diskNeed bounds what real SQLite outbox files take: full of records of
// the sizes that waste the most (no payload; a record just over half a
// page), with done_retention tombstones beside them.
func TestDiskNeed_BoundsARealOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 30 MB of SQLite")
	}
	for _, payload := range []int{0, 200, 2000, 3000} {
		path := filepath.Join(t.TempDir(), "outbox.db")
		s, err := sqlite.Open(path, sqlite.Options{Sync: "normal", DoneRetention: 1000})
		if err != nil {
			t.Fatal(err)
		}
		var size, n int64
		for range 3 {
			b := stores.Batch{Append: make([]stores.Record, 1000)}
			for i := range b.Append {
				b.Append[i] = stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{
					ID: message.NewID(), Topic: "factory/1/telemetry", Payload: make([]byte, payload)}}
				size += b.Append[i].Size()
			}
			if err := s.Write(t.Context(), &b); err != nil {
				t.Fatal(err)
			}
			n += int64(len(b.Append))
		}
		if err := s.Close(); err != nil { // checkpoints the WAL into the file
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// The WAL is gone after Close: the bound less its WAL allowance
		// must hold the file.
		need := routes.DiskNeed([]int64{size}, []int64{n}, 0)
		t.Logf("payload %d: %d records of %d bytes in a %d-byte file, bound %d", payload, n, size, fi.Size(), need-32<<20)
		if uint64(fi.Size()) > need-32<<20 {
			t.Errorf("payload %d: the file is %d bytes, over the %d diskNeed allows", payload, fi.Size(), need-32<<20)
		}
	}
}
