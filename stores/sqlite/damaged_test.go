package sqlite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpen_DamagedFileSaysWhatToDo: a file that is not a database, and an
// outbox whose pages were overwritten (a power loss on an SD card), are
// refused with SQLite's error and what the operator can do about it.
func TestOpen_DamagedFileSaysWhatToDo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	damagedPages := filepath.Join(dir, "damaged.db")
	s, err := Open(damagedPages, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(damagedPages, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	for off := int64(4096); off < st.Size(); off += 4096 { // every page but the header's
		if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 64)), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	for name, path := range map[string]string{"not a database": garbage, "damaged pages": damagedPages} {
		s, err := Open(path, Options{})
		if err == nil {
			s.Close()
			t.Errorf("%s: opened", name)
			continue
		}
		if !strings.Contains(err.Error(), ".recover") || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: the error does not say what to do: %v", name, err)
		}
	}
}
