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

func open(t *testing.T, path string, opts sqlite.Options) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(path, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func features(sync string) storetest.Features {
	return storetest.Features{
		Reopen: func(t *testing.T, s stores.Store) stores.Store {
			t.Helper()
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return open(t, s.(*sqlite.Store).Path(), sqlite.Options{Sync: sync})
		},
		ReopenReleasesLeases: true,
	}
}

func TestStore_Conformance(t *testing.T) {
	for _, sync := range []string{"full", "normal"} {
		t.Run("sync="+sync, func(t *testing.T) {
			storetest.Run(t, features(sync), func(t *testing.T) stores.Store {
				return open(t, filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{Sync: sync})
			})
		})
	}
}

func TestOpen_PathWithURICharacters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a #b?c%20d", "out box.db")
	s := open(t, path, sqlite.Options{})
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
