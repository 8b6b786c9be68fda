//go:build unix

package sqlite_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// TestOpen_CreatesPrivateFiles: the outbox holds every payload in flight;
// its directory is 0700 and the database, -wal and -shm files 0600, even
// under a umask of 0 (the modes must not depend on it).
func TestOpen_CreatesPrivateFiles(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "var", "gobridge")
	db := filepath.Join(dir, "outbox.db")
	st, err := sqlite.Open(db, sqlite.Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := stores.Record{Session: "s", Route: "r", CreatedAt: time.Now(),
		Envelope: message.Envelope{ID: message.NewID(), Topic: "t", Payload: []byte("secret payload")}}
	if err := st.Write(t.Context(), &stores.Batch{Append: []stores.Record{rec}}); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700 | os.ModeDir, db: 0o600, db + "-wal": 0o600, db + "-shm": 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode(), want)
		}
	}
}

// TestOpen_KeepsTheModeOfAnExistingFile: an operator's chosen mode (a
// backup agent in the group) is left alone.
func TestOpen_KeepsTheModeOfAnExistingFile(t *testing.T) {
	db := filepath.Join(t.TempDir(), "outbox.db")
	if err := os.WriteFile(db, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(db, 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(db, sqlite.Options{Sync: "normal"})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if fi, err := os.Stat(db); err != nil || fi.Mode() != 0o640 {
		t.Fatalf("mode %v, %v; want 0640 kept", fi.Mode(), err)
	}
}
