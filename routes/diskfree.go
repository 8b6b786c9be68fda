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

// What a SQLite outbox takes on disk beyond its records' Size (measured on
// real files, TestDiskNeed_BoundsARealOutbox): about 180 bytes a record
// (its key, bookkeeping and index entries), and a record just over half a
// 4 KiB page takes a page, 2.2 times its Size; a tombstone takes about 200
// bytes; the -wal file is cut back to 32 MiB (stores/sqlite journalLimit).
const (
	recordOverhead = 200
	pageWaste      = 2.25
	walBytes       = 32 << 20
)

// diskNeed is the most disk a SQLite outbox takes whose sessions have the
// byte and record limits bytes[i] and depth[i] and that keeps retention
// tombstones (dead letters aside: nothing bounds their bytes).
func diskNeed(bytes, depth []int64, retention int) uint64 {
	need := float64(walBytes + recordOverhead*max(retention, 0))
	for i, b := range bytes {
		need += max(pageWaste*float64(b), float64(b)+recordOverhead*float64(depth[i]))
	}
	return uint64(min(need, 1<<63))
}

// checkDiskSpace warns when the filesystem of a SQLite outbox has less room
// than its sessions may fill at their max_outbox_bytes and max_outbox_depth
// (DESIGN.md §11.8), with SQLite's overhead: diskNeed. A full disk still
// loses nothing (appends fail, ingest pushes back), but the outage the
// limits were sized for does not fit.
func (c *Config) checkDiskSpace(add func(Problem)) {
	o := c.Stores.Outbox
	if o == nil || o.Type != "sqlite" {
		return
	}
	limits := map[string][2]int64{}
	for _, r := range c.Routes {
		if r.UsesOutbox() && r.Session.ID != "" {
			l := limits[r.Session.ID]
			limits[r.Session.ID] = [2]int64{max(l[0], r.Policy.MaxOutboxBytes), max(l[1], int64(r.Policy.MaxOutboxDepth))}
		}
	}
	var bytes, depth []int64
	for _, l := range limits {
		bytes, depth = append(bytes, l[0]), append(depth, l[1])
	}
	need := diskNeed(bytes, depth, o.Options.DoneRetention)
	if free, ok := freeBytes(o.Options.Path); ok && len(limits) > 0 && need > free {
		add(c.Warnf("stores.outbox.options.path", "disk-space",
			"stores.outbox.options.path: the filesystem of %s has %s free, less than the %s its sessions may fill (their policy.max_outbox_bytes and max_outbox_depth, with SQLite's overhead: see the README's Stores section); give it more room, or lower the limits to what an outage should hold",
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
