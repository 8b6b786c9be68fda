package main

import (
	"bytes"
	"encoding/json"
	"os"
	goruntime "runtime"
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
	if code, out, errOut := gobridge(t, "check", "-h"); code != exitOK || !strings.Contains(out, "Usage: gobridge check") || errOut != "" {
		t.Errorf("check -h: exit %d, %q", code, errOut)
	}
}

func TestVersion_PrintsBuildInfo(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "gobridge ") || !strings.Contains(out, goruntime.Version()) {
		t.Fatalf("exit %d, %q", code, out)
	}
	for _, flag := range []string{"--version", "-version", "-v"} {
		if c, o, _ := gobridge(t, flag); c != exitOK || o != out {
			t.Errorf("gobridge %s: exit %d, %q; want %q", flag, c, o, out)
		}
	}
	info := &debug.BuildInfo{GoVersion: "go1.26", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"},
			{Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}}}
	platform := goruntime.GOOS + "/" + goruntime.GOARCH
	if got, want := readBuild(info, true).String(), "gobridge v1.2.3 (commit abc123, modified, built 2026-11-30T10:00:00Z) go1.26 "+platform; got != want {
		t.Errorf("from build info: %q, want %q", got, want)
	}
	// dist.sh stamps version, commit and date with -X; they win.
	for v, val := range map[*string]string{&version: "v9.9.9", &commit: "def456", &date: "2026-12-01T00:00:00Z"} {
		old := *v
		*v = val
		defer func() { *v = old }()
	}
	if got, want := readBuild(info, true).String(), "gobridge v9.9.9 (commit def456, built 2026-12-01T00:00:00Z) go1.26 "+platform; got != want {
		t.Errorf("stamped: %q, want %q", got, want)
	}
	if got, want := readBuild(nil, false).String(), "gobridge v9.9.9 (commit def456, built 2026-12-01T00:00:00Z) "+goruntime.Version()+" "+platform; got != want {
		t.Errorf("stamped, no build info: %q, want %q", got, want)
	}
}

func TestSchema_PrintsTheCommittedSchema(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "schema")
	want, err := os.ReadFile("schema/gobridge.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	if code != exitOK || out != string(want) {
		t.Fatalf("exit %d; output differs from schema/gobridge.schema.json", code)
	}
	if !json.Valid([]byte(out)) {
		t.Fatal("not JSON")
	}
	if code, _, _ := gobridge(t, "schema", "extra"); code != exitUsage {
		t.Errorf("schema extra: exit %d, want %d", code, exitUsage)
	}
}

// inRoot makes the repository root the working directory for the test, so
// paths print as `gobridge check` run from the root prints them.
func inRoot(t *testing.T) {
	t.Helper()
	t.Chdir("../..")
}
