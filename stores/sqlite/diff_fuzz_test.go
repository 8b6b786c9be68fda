package sqlite_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
	"github.com/gobridge/gobridge/stores/sqlite"
	"github.com/gobridge/gobridge/stores/storetest"
)

// FuzzStore_MatchesMemory drives the SQLite store and the memory store (the
// reference) through the same random operations and fails on the first
// answer that differs (storetest.Diff). SQLite's Seqs are the reference's:
// dense and global.
//
// The inputs a fuzzing process runs share the two stores (a fresh pair
// every 500 inputs), each input with a session and routes of its own:
// opening a SQLite file costs more than running an input.
func FuzzStore_MatchesMemory(f *testing.F) {
	for _, seed := range storetest.DiffSeeds {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ops []byte) {
		storetest.Diff(t, sharedEnv(t), ops)
	})
}

// shared are the stores the inputs of one fuzzing process share.
var shared struct {
	dir, path string
	env       *storetest.DiffEnv
}

// TestMain removes the directory of the shared stores.
func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		_ = shared.env.Store.Close()
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

func sharedEnv(t *testing.T) *storetest.DiffEnv {
	if shared.env != nil && shared.env.Inputs%500 != 0 {
		return shared.env
	}
	if shared.dir == "" {
		dir, err := os.MkdirTemp("", "gobridge-fuzz-")
		if err != nil {
			t.Fatal(err)
		}
		shared.dir = dir
	}
	inputs := 0
	if e := shared.env; e != nil {
		inputs = e.Inputs
		_ = e.Store.Close()
		_ = os.Remove(shared.path)
	}
	shared.path = filepath.Join(shared.dir, fmt.Sprint(inputs, ".db"))
	e := &storetest.DiffEnv{Name: "sqlite", Time: time.Unix(1_700_000_000, 0).UTC(), Inputs: inputs, ReopenReleasesLeases: true}
	e.Ref = memory.New(memory.Options{Now: e.Now})
	e.Reopen = func(t *testing.T) stores.Store {
		if e.Store != nil {
			if err := e.Store.Close(); err != nil {
				t.Fatal(err)
			}
		}
		s, err := sqlite.Open(shared.path, sqlite.Options{Sync: "normal", Now: e.Now})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	e.Store = e.Reopen(t)
	shared.env = e
	return e
}
