package sqlite

import (
	"errors"
	"fmt"
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
