package sqlite_test

import (
	"bufio"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

const lockEnvPath = "GOBRIDGE_LOCK_CHILD_DB"

var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func rec(id string) stores.Record {
	return stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: id, Topic: "t", Payload: []byte("p")}, CreatedAt: t0}
}

// TestLockChild is the child side of TestOpen_LockedByAnotherProcess: it
// owns the store, leases partition 0 and appends three records claimed and
// a dead letter, prints "ready", and holds the file until it is killed. It
// does nothing unless started by the parent.
func TestLockChild(t *testing.T) {
	path := os.Getenv(lockEnvPath)
	if path == "" {
		t.Skip("child process of TestOpen_LockedByAnotherProcess")
	}
	fail := func(err error) {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(2)
	}
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		fail(err)
	}
	le, err := s.Acquire(t.Context(), stores.PartitionLease("s", 0), "child", time.Hour, time.Now())
	if err != nil {
		fail(err)
	}
	b := stores.Batch{Append: []stores.Record{rec("a"), rec("b"), rec("c"), rec("d")}}
	for i := range 3 {
		b.Append[i].Token = le.Token
	}
	b.Append[3].State, b.Append[3].DeadReason = stores.Dead, "bad"
	if err := s.Write(t.Context(), &b); err != nil || b.Append[0].Token != le.Token {
		fail(errors.Join(err, errors.New("not appended claimed")))
	}
	os.Stdout.WriteString("ready\n")
	select {} // until killed
}

// TestOpen_LockedByAnotherProcess: while a real second process owns the
// file, Open fails at once naming it (pid, host) and a read-only store reads
// the file (and refuses to change it); after kill -9 of the owner the lock
// is free, and the new owner takes the dead one's partition lease and claims
// at once.
func TestOpen_LockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockEnvPath+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		t.Fatalf("child: %q", sc.Text())
	}

	_, err = sqlite.Open(path, sqlite.Options{})
	var le *sqlite.LockedError
	host, _ := os.Hostname()
	if !errors.As(err, &le) || le.PID != cmd.Process.Pid || le.Host != host || le.Path != path {
		t.Fatalf("Open of a file another process owns = %v (%+v), want a LockedError naming pid %d on %s", err, le, cmd.Process.Pid, host)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("the error does not name the file: %v", err)
	}

	ro, err := sqlite.Open(path, sqlite.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open while another process owns the file: %v", err)
	}
	st, err := ro.Stats(t.Context())
	if err != nil || len(st) != 1 || st[0].Live != 3 || st[0].Routes["r"].Dead != 1 {
		t.Errorf("read-only Stats = %+v, %v; want 3 live and 1 dead", st, err)
	}
	if dead, _, err := ro.Dead(t.Context(), stores.DeadQuery{}); err != nil || len(dead) != 1 {
		t.Errorf("read-only Dead = %d, %v; want 1", len(dead), err)
	}
	if ls, err := ro.List(t.Context(), "outbox/", time.Now()); err != nil || len(ls) != 1 || ls[0].Owner != "child" {
		t.Errorf("read-only List = %+v, %v; want the child's lease", ls, err)
	}
	w := stores.Batch{Append: []stores.Record{rec("e")}}
	_, claimErr := ro.Claim(t.Context(), stores.ClaimRequest{Session: "s", Token: 1, Limit: 1})
	_, acquireErr := ro.Acquire(t.Context(), "x", "o", time.Second, time.Now())
	for what, err := range map[string]error{"Write": ro.Write(t.Context(), &w), "Claim": claimErr, "Acquire": acquireErr} {
		if !errors.Is(err, sqlite.ErrReadOnly) {
			t.Errorf("read-only %s = %v, want ErrReadOnly", what, err)
		}
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	s, err := sqlite.Open(path, sqlite.Options{})
	if err != nil {
		t.Fatalf("Open after the owner was killed: %v", err)
	}
	defer s.Close()
	lease, err := s.Acquire(t.Context(), stores.PartitionLease("s", 0), "successor", time.Hour, time.Now())
	if err != nil {
		t.Fatalf("Acquire of the dead owner's lease: %v", err)
	}
	got, err := s.Claim(t.Context(), stores.ClaimRequest{Session: "s", Token: lease.Token, Limit: 10})
	if err != nil || len(got) != 3 {
		t.Fatalf("Claim of the dead owner's records = %d, %v; want 3", len(got), err)
	}
}

// TestOpen_TwiceInOneProcess: the lock holds between two Opens of one
// process too, and Close releases it.
func TestOpen_TwiceInOneProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := open(t, path, sqlite.Options{})
	_, err := sqlite.Open(path, sqlite.Options{})
	var le *sqlite.LockedError
	if !errors.As(err, &le) || le.PID != os.Getpid() {
		t.Fatalf("second Open = %v, want a LockedError naming this process", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, path, sqlite.Options{})
}

// TestOpen_FileModes: the directory is created 0700 and the database, its
// WAL, shared memory and lock files 0600, even under umask 0.
func TestOpen_FileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := filepath.Join(t.TempDir(), "data", "gobridge")
	path := filepath.Join(dir, "outbox.db")
	s := open(t, path, sqlite.Options{})
	w := stores.Batch{Append: []stores.Record{rec("a")}}
	if err := s.Write(t.Context(), &w); err != nil {
		t.Fatal(err)
	}
	want := map[string]fs.FileMode{dir: fs.ModeDir | 0o700, path: 0o600, path + "-wal": 0o600, path + "-shm": 0o600, path + ".lock": 0o600}
	for p, mode := range want {
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", p, fi.Mode(), mode)
		}
	}
}

// TestOpen_ReadOnlyNeedsAFile: a read-only Open of a missing file fails
// and creates nothing.
func TestOpen_ReadOnlyNeedsAFile(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "none")
	if _, err := sqlite.Open(filepath.Join(dir, "outbox.db"), sqlite.Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("read-only Open of a missing file = %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open created %s", dir)
	}
}

// TestOpen_RefusesAnOlderSchema: a file of the layouts before this one is
// refused with an error, and left as it was.
func TestOpen_RefusesAnOlderSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE outbox (seq INTEGER PRIMARY KEY); PRAGMA user_version = 4`); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sqlite.Open(path, sqlite.Options{}); !errors.Is(err, sqlite.ErrSchema) {
		t.Fatalf("Open of a version 4 file = %v, want it refused", err)
	}
	db, _ = sql.Open("sqlite", path)
	defer db.Close()
	var v int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != 4 {
		t.Errorf("user_version after the refusal = %d, %v", v, err)
	}
}

// TestOpen_ReadOnlyWithoutOwner: a read-only store reads a file no process
// owns (its WAL checkpointed and removed by the owner's Close) and leaves
// it as it was.
func TestOpen_ReadOnlyWithoutOwner(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s := open(t, path, sqlite.Options{})
	w := stores.Batch{Append: []stores.Record{rec("a")}}
	if err := s.Write(t.Context(), &w); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ro := open(t, path, sqlite.Options{ReadOnly: true})
	if st, err := ro.Stats(t.Context()); err != nil || len(st) != 1 || st[0].Live != 1 {
		t.Fatalf("read-only Stats = %+v, %v; want 1 live", st, err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path, sqlite.Options{})
	if st, err := s.Stats(t.Context()); err != nil || len(st) != 1 || st[0].Live != 1 {
		t.Fatalf("Stats after the read-only store = %+v, %v; want 1 live", st, err)
	}
}
