package drainer

import (
	"path/filepath"
	"testing"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// The SQLite store runs every behaviour test and the benchmark, like memory.
func init() {
	extraBackends = append(extraBackends, struct {
		name string
		open func(t *testing.T) stores.Store
	}{"sqlite", func(t *testing.T) stores.Store {
		s, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{})
		if err != nil {
			t.Fatalf("open sqlite: %v", err)
		}
		return s
	}})
	benchBackends = append(benchBackends, struct {
		name string
		open func(b *testing.B) stores.Outbox
	}{"sqlite", func(b *testing.B) stores.Outbox {
		s, err := sqlite.Open(filepath.Join(b.TempDir(), "outbox.db"), sqlite.Options{})
		if err != nil {
			b.Fatalf("open sqlite: %v", err)
		}
		return s
	}})
}
