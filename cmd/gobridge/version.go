package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3";
// otherwise it comes from the module's build info.
var version = ""

// VersionCommand prints gobridge's version and commit.
type VersionCommand struct {
	Stdout, Stderr io.Writer
}

// Run prints "gobridge VERSION (commit COMMIT[, modified]) GOVERSION".
func (c *VersionCommand) Run(_ context.Context, args []string) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(c.Stderr)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: gobridge version\n\nVersion prints the version, the VCS commit and the Go version gobridge was built with.")
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.Stderr, "version: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	_, err := fmt.Fprintln(c.Stdout, versionString(debug.ReadBuildInfo()))
	return err
}

// versionString formats build info; ok is false when none is available.
func versionString(info *debug.BuildInfo, ok bool) string {
	v, commit, modified, goVersion := version, "unknown", false, "unknown"
	if ok {
		goVersion = info.GoVersion
		if v == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			v = info.Main.Version
		}
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	if modified {
		commit += ", modified"
	}
	return fmt.Sprintf("gobridge %s (commit %s) %s", v, commit, goVersion)
}
