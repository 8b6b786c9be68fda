package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

func TestCheck_AcceptsBlueprints(t *testing.T) {
	inRoot(t)
	files, err := filepath.Glob("blueprints/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no blueprints: %v", err)
	}
	for _, f := range files {
		code, out, errOut := gobridge(t, "check", "-c", "blueprints/"+filepath.Base(f))
		if code != exitOK || out != "" {
			t.Errorf("check %s: exit %d\n%s%s", f, code, out, errOut)
		}
	}
}

func TestCheck_PrintsGoldenProblems(t *testing.T) {
	inRoot(t)
	want, err := os.ReadFile("testdata/config/multi-problem.golden")
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := gobridge(t, "check", "-c", "testdata/config/multi-problem.yaml")
	if code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	if out != string(want) {
		t.Errorf("output differs from the golden:\n%s\nwant:\n%s", out, want)
	}
	if !strings.Contains(errOut, "config invalid") {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestCheck_WarningsExitZero(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "check", "-c", "testdata/config/memory-outbox-and-other-warnings.yaml")
	if code != exitOK || !strings.Contains(out, ": warning: ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

func TestCheck_JSON(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "check", "--format", "json", "-c", "testdata/config/unknown-sender.yaml")
	if code != exitFailure {
		t.Fatalf("exit %d", code)
	}
	var got []map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(got) != 1 {
		t.Fatalf("got %d problems: %s", len(got), out)
	}
	p := got[0]
	if p["file"] != "testdata/config/unknown-sender.yaml" || p["line"] != 16.0 || p["column"] != 13.0 ||
		p["rule"] != "unknown-sender" || p["severity"] != "error" || p["message"] == "" {
		t.Fatalf("problem = %v", p)
	}
	code, out, _ = gobridge(t, "check", "--format", "json", "-c", "blueprints/quickstart.yaml")
	if code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("clean config: exit %d, %q", code, out)
	}
}

func TestRun_UsageErrors(t *testing.T) {
	inRoot(t)
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"check"},
		{"check", "-c", "x.yaml", "--format", "xml"},
		{"check", "--nope"},
		{"check", "-c", "x.yaml", "extra"},
		{"version", "extra"},
	} {
		if code, _, _ := gobridge(t, args...); code != exitUsage {
			t.Errorf("gobridge %q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, errOut := gobridge(t, "check", "-c", "does-not-exist.yaml"); code != exitFailure || !strings.Contains(errOut, "does-not-exist.yaml") {
		t.Errorf("missing file: exit %d, %q", code, errOut)
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

func TestCheck_ReportsExpressionErrors(t *testing.T) {
	inRoot(t)
	path := filepath.Join(t.TempDir(), "expr.yaml")
	cfg := `version: 1
bridge: {id: test}
receivers:
  - {id: edge, type: mqtt_listener, topics: [{topic: "#"}]}
senders:
  - {id: out, type: stdout}
routes:
  - id: all
    receiver: edge
    topic: "#"
    processors:
      - type: filter
        expr: "payload.temp >"
    sender: out
    policy: {on_expired: drop, on_permanent_failure: drop}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := gobridge(t, "check", "-c", path)
	if code != exitFailure || !strings.HasPrefix(out, path+":13:15: processor: routes[0].processors[0].expr: ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}
