package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

// gobridge runs the command function as main would and returns its exit
// code and output. Tests first chdir to the repository root (inRoot).
func gobridge(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRun_UsageErrors(t *testing.T) {
	inRoot(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"check"},
		{"check", "-c", "x.yaml", "--format", "xml"},
		{"check", "x.yaml", "--format", "xml"},
		{"check", "--nope"},
		{"check", "x.yaml", "--nope"},
		{"check", "--strict"},
		{"version", "extra"},
	} {
		if code, _, _ := gobridge(t, args...); code != exitUsage {
			t.Errorf("gobridge %q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, out, _ := gobridge(t, "help"); code != exitOK || !strings.Contains(out, "gobridge check") {
		t.Errorf("help: exit %d, %q", code, out)
	}
	if code, _, errOut := gobridge(t, "check", "-h"); code != exitOK || !strings.Contains(errOut, "Usage: gobridge check") {
		t.Errorf("check -h: exit %d, %q", code, errOut)
	}
}

func TestVersion_PrintsBuildInfo(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "gobridge ") {
		t.Fatalf("exit %d, %q", code, out)
	}
	info := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}
	if got := versionString(info, true); got != "gobridge v1.2.3 (commit abc123, modified) go1.26" {
		t.Errorf("versionString = %q", got)
	}
	old := version
	version = "v9.9.9"
	defer func() { version = old }()
	if got := versionString(info, true); !strings.HasPrefix(got, "gobridge v9.9.9 ") {
		t.Errorf("-X main.version override ignored: %q", got)
	}
}

// inRoot makes the repository root the working directory for the test, so
// paths print as `gobridge check` run from the root prints them.
func inRoot(t *testing.T) {
	t.Helper()
	t.Chdir("../..")
}
