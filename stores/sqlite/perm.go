package sqlite

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// createPrivate creates the directory of path (mode 0700) and the database
// file itself (mode 0600) when they do not exist yet, with exactly those
// modes whatever the umask. SQLite creates the -wal and -shm files with
// the database file's mode, so they are private too. The outbox holds
// every payload in flight: other local users must not read it. Existing
// files and directories keep their modes.
func createPrivate(path string) error {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o700); err != nil {
			return err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return nil
	case err != nil:
		return err
	}
	if err := f.Chmod(0o600); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
