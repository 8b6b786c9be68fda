package routes

import (
	"fmt"
	"path/filepath"
	"syscall"
)

// freeBytes returns the bytes free to an unprivileged user on the
// filesystem that holds path (or, when path does not exist yet, its nearest
// existing parent); ok is false when it cannot tell.
func freeBytes(path string) (free uint64, ok bool) {
	dir, err := filepath.Abs(path)
	if err != nil {
		return 0, false
	}
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(dir, &st); err == nil {
			return st.Bavail * uint64(st.Bsize), true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return 0, false
		}
		dir = parent
	}
}

// checkDiskSpace warns when the filesystem of a SQLite outbox has less room
// than its sessions may fill: the sum of their max_outbox_bytes (DESIGN.md
// §11.8). A full disk still loses nothing (appends fail, ingest pushes
// back), but the outage the limits were sized for does not fit.
func (c *Config) checkDiskSpace(add func(Problem)) {
	o := c.Stores.Outbox
	if o == nil || o.Type != "sqlite" {
		return
	}
	limits := map[string]int64{}
	for _, r := range c.Routes {
		if r.UsesOutbox() && r.Session.ID != "" {
			limits[r.Session.ID] = max(limits[r.Session.ID], r.Policy.MaxOutboxBytes)
		}
	}
	var need uint64
	for _, n := range limits {
		need += uint64(n)
	}
	if free, ok := freeBytes(o.Options.Path); ok && need > free {
		add(c.Warnf("stores.outbox.options.path", "disk-space",
			"stores.outbox.options.path: the filesystem of %s has %s free, less than the %s its sessions may fill (the sum of their policy.max_outbox_bytes); give it more room, or lower max_outbox_bytes to what an outage should hold",
			o.Options.Path, byteSize(free), byteSize(need)))
	}
}

// byteSize formats n bytes for messages (binary units).
func byteSize(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}
