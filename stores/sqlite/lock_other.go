//go:build !linux

package sqlite

import (
	"errors"
	"os"
)

// own fails: single ownership (flock and the filesystem check) is built for
// Linux only; other systems can open a store read-only.
func own(string) (*os.File, error) {
	return nil, errors.New("a SQLite store can be owned only on Linux (open it read-only elsewhere)")
}
