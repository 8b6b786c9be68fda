package sqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// own prepares path for its owner: the directory (0700) and the database
// file (0600), on a local filesystem, and the exclusive lock on path.lock,
// whose file it returns. Closing that file releases the lock.
func own(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil, err
	}
	if name := networkFS(int64(st.Type)); name != "" {
		return nil, fmt.Errorf("%w (%s)", ErrNetworkFS, name)
	}
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		le := &LockedError{Path: path}
		if b, rerr := os.ReadFile(f.Name()); rerr == nil {
			var pid string
			le.Host, pid, _ = strings.Cut(strings.TrimSpace(string(b)), " ")
			le.PID, _ = strconv.Atoi(pid)
		}
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, le
		}
		return nil, fmt.Errorf("lock %s.lock: %w", path, err)
	}
	host, _ := os.Hostname()
	err = errors.Join(f.Chmod(0o600), f.Truncate(0))
	if err == nil {
		_, err = f.WriteAt([]byte(host+" "+strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err == nil {
		err = createFile(path)
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// networkFS names the network filesystem whose statfs magic number is
// magic, or returns "" for any other.
func networkFS(magic int64) string {
	return map[uint32]string{0x6969: "nfs", 0x517b: "smb", 0xff534d42: "cifs", 0xfe534d42: "smb2", 0x01021997: "9p",
		0x5346414f: "afs", 0x73757245: "coda", 0x00c36400: "ceph", 0x564c: "ncp", 0x0bd00bd0: "lustre"}[uint32(magic)]
}

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
