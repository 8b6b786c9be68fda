package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	goruntime "runtime"
	"runtime/debug"
)

// Build stamps, set by scripts/dist.sh with
// -ldflags "-X main.version=v1.2.3 -X main.commit=SHA -X main.date=RFC3339".
// Empty ones come from the binary's build info when it has them (a build
// from a git checkout records the commit and its time; `go install
// ...@v1.2.3` records the version).
var version, commit, date string

// buildInfo is what `gobridge version` prints and gobridge_build_info
// exports.
type buildInfo struct {
	Version   string // "v1.2.3", or "devel"
	Commit    string // the VCS revision, or "unknown"
	Modified  bool   // built from a tree with uncommitted changes
	Date      string // build (or commit) time, RFC 3339; "" when unknown
	GoVersion string // "go1.26.8"
	Platform  string // "linux/amd64"
}

// readBuild combines the -X stamps with build info (debug.ReadBuildInfo);
// ok is false when there is none.
func readBuild(info *debug.BuildInfo, ok bool) buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date,
		GoVersion: goruntime.Version(), Platform: goruntime.GOOS + "/" + goruntime.GOARCH}
	if ok {
		b.GoVersion = info.GoVersion
		if b.Version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.Version = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = cmp.Or(b.Commit, s.Value)
			case "vcs.time":
				b.Date = cmp.Or(b.Date, s.Value)
			case "vcs.modified":
				b.Modified = commit == "" && s.Value == "true"
			}
		}
	}
	b.Version, b.Commit = cmp.Or(b.Version, "devel"), cmp.Or(b.Commit, "unknown")
	return b
}

// String formats b as "gobridge VERSION (commit COMMIT[, modified][, built
// DATE]) GOVERSION PLATFORM".
func (b buildInfo) String() string {
	c := b.Commit
	if b.Modified {
		c += ", modified"
	}
	if b.Date != "" {
		c += ", built " + b.Date
	}
	return fmt.Sprintf("gobridge %s (commit %s) %s %s", b.Version, c, b.GoVersion, b.Platform)
}

// VersionCommand prints gobridge's version, commit, build date and Go
// version: `gobridge version`, also `gobridge --version` and `gobridge -v`.
type VersionCommand struct {
	Stdout, Stderr io.Writer
}

// Run prints one line, as buildInfo.String formats it.
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := newFlags("version", "Usage: gobridge version (or gobridge --version, gobridge -v)\n\n"+
		"Version prints the version, the VCS commit, the build date, the Go version and the platform gobridge was built for.\n", c.Stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	_, err := fmt.Fprintln(c.Stdout, readBuild(debug.ReadBuildInfo()))
	return err
}
