package sqlite

import (
	"errors"
	"fmt"
	"os"
)

// LockedError is what Open returns when another Store, in this process or
// another one, owns the file.
type LockedError struct {
	// Path is the store file.
	Path string
	// Host and PID name the holder, as it wrote them into the lock file
	// (empty and 0 when it had not written them yet).
	Host string
	PID  int
}

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s is owned by process %d on host %q (lock file %s.lock): one gobridge process per store file",
		e.Path, e.PID, e.Host, e.Path)
}

// ErrNetworkFS is what Open returns for a file on a network filesystem,
// where SQLite's WAL mode and the lock are unsafe.
var ErrNetworkFS = errors.New("the file is on a network filesystem, where SQLite's WAL is unsafe: put it on a local disk")

// ensureDir creates dir 0700 when it does not exist.
func ensureDir(dir string) error {
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, 0o700) // whatever the umask
}

// createFile creates path 0600 when it does not exist; SQLite gives its
// -wal and -shm files the same mode.
func createFile(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return errors.Join(f.Chmod(0o600), f.Close())
}
