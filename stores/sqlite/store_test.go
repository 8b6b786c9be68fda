package sqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
	"github.com/gobridge/gobridge/stores/storetest"
)

func open(t *testing.T, path string, sync string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, sqlite.Options{Sync: sync})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func reopen(t *testing.T, s *sqlite.Store) *sqlite.Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return open(t, s.Path(), "full")
}

var features = storetest.Features{
	Reopen: func(t *testing.T, s stores.Store) stores.Store { return reopen(t, s.(*sqlite.Store)) },
	ReopenLeases: func(t *testing.T, l stores.Leases) stores.Leases {
		return reopen(t, l.(*sqlite.Leases).Store()).Leases()
	},
}

func TestStore_Conformance(t *testing.T) {
	storetest.RunWith(t, features, func(t *testing.T) stores.Store {
		return open(t, filepath.Join(t.TempDir(), "outbox.db"), "full")
	})
}

func TestStore_ConformanceSyncNormal(t *testing.T) {
	storetest.RunWith(t, features, func(t *testing.T) stores.Store {
		return open(t, filepath.Join(t.TempDir(), "outbox.db"), "normal")
	})
}

func TestLeases_Conformance(t *testing.T) {
	storetest.RunLeasesWith(t, features, func(t *testing.T) stores.Leases {
		return open(t, filepath.Join(t.TempDir(), "outbox.db"), "full").Leases()
	})
}

func TestOpenLeases_Conformance(t *testing.T) {
	storetest.RunLeases(t, func(t *testing.T) stores.Leases {
		l, err := sqlite.OpenLeases(filepath.Join(t.TempDir(), "leases.db"), sqlite.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		return l
	})
}

func TestOpen_PathWithURICharacters(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a #b?c%20d")
	path := filepath.Join(dir, "out box.db")
	s := open(t, path, "full")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the store is not at the path it was given: %v", err)
	}
}

func TestOpen_RejectsUnknownSync(t *testing.T) {
	t.Parallel()
	_, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Sync: "off"})
	if !errors.Is(err, stores.ErrInvalid) {
		t.Fatalf("Open with sync off = %v, want ErrInvalid", err)
	}
}
