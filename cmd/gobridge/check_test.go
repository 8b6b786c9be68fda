package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// golden returns the expected text output of a testdata/config case.
func golden(t *testing.T, name string) string {
	t.Helper()
	want, err := os.ReadFile("testdata/config/" + name + ".golden")
	if err != nil {
		t.Fatal(err)
	}
	return string(want)
}

func TestCheck_AcceptsBlueprints(t *testing.T) {
	inRoot(t)
	files, err := filepath.Glob("blueprints/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no blueprints: %v", err)
	}
	for _, f := range files {
		code, out, errOut := gobridge(t, "check", "--strict", f)
		if code != exitOK || out != "" {
			t.Errorf("check %s: exit %d\n%s%s", f, code, out, errOut)
		}
	}
	// The shell did not expand the pattern: check does.
	code, out, errOut := gobridge(t, "check", "--strict", "blueprints/*.yaml")
	if code != exitOK || out != "" || !strings.Contains(errOut, "configs ok") {
		t.Errorf("check 'blueprints/*.yaml': exit %d\n%s%s", code, out, errOut)
	}
}

// TestCheck_PositionalFile is what CI users type: the file as an argument.
func TestCheck_PositionalFile(t *testing.T) {
	inRoot(t)
	code, out, errOut := gobridge(t, "check", "testdata/config/multi-problem.yaml")
	if code != exitFailure {
		t.Errorf("exit %d, want %d", code, exitFailure)
	}
	if want := golden(t, "multi-problem"); out != want {
		t.Errorf("output differs from the golden:\n%s\nwant:\n%s", out, want)
	}
	lines, warns := strings.Count(out, "\n"), strings.Count(out, ": warning: ")
	if want := fmt.Sprintf("config invalid: %d errors, %d warnings", lines-warns, warns); !strings.Contains(errOut, want) {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}
	// One of a kind is singular.
	code, _, errOut = gobridge(t, "check", "testdata/config/bad-version.yaml")
	if code != exitFailure || !strings.Contains(errOut, "config invalid: 1 error, 0 warnings") {
		t.Errorf("exit %d, stderr = %q", code, errOut)
	}
}

// TestCheck_EveryProblemOfEveryFile checks several files (-c, arguments
// and a pattern, flags mixed in) and prints every problem of each, in the
// order given, each file once.
func TestCheck_EveryProblemOfEveryFile(t *testing.T) {
	inRoot(t)
	code, out, errOut := gobridge(t, "check",
		"-c", "testdata/config/unused-sender.yaml",
		"testdata/config/unknown-*.yaml",
		"--format", "text",
		"blueprints/quickstart.yaml",
		"-c", "testdata/config/coalesce-on-direct-hold.yaml",
		"testdata/config/unused-sender.yaml", // again: checked once
	)
	want := golden(t, "unused-sender") + golden(t, "unknown-key") + golden(t, "unknown-placeholder") +
		golden(t, "unknown-receiver") + golden(t, "unknown-sender") + golden(t, "coalesce-on-direct-hold")
	if code != exitFailure || out != want {
		t.Errorf("exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
	if !strings.Contains(errOut, "7 configs invalid") {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestCheck_WarningsExitZeroUnlessStrict(t *testing.T) {
	inRoot(t)
	const file = "testdata/config/memory-outbox-and-other-warnings.yaml"
	code, out, _ := gobridge(t, "check", file)
	if code != exitOK || !strings.Contains(out, ": warning: ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
	code, out2, _ := gobridge(t, "check", file, "--strict")
	if code != exitFailure || out2 != out {
		t.Fatalf("--strict: exit %d, output:\n%s", code, out2)
	}
}

func TestCheck_JSON(t *testing.T) {
	inRoot(t)
	code, out, _ := gobridge(t, "check", "--format", "json", "testdata/config/unknown-sender.yaml")
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
	code, out, _ = gobridge(t, "check", "--format", "json", "blueprints/quickstart.yaml", "blueprints/webhook.yaml")
	if code != exitOK || strings.TrimSpace(out) != "[]" {
		t.Fatalf("clean configs: exit %d, %q", code, out)
	}
}

// unreadable returns files that cannot be read as configs: missing, a
// directory, a symlink loop and (unless the test runs as root, who reads
// anything) a file without read permission.
func unreadable(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		filepath.Join(dir, "missing.yaml"): "no such file or directory",
		dir:                                "is a directory",
		filepath.Join(dir, "loop.yaml"):    "too many levels of symbolic links",
	}
	if err := os.Symlink("loop.yaml", filepath.Join(dir, "loop.yaml")); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(dir, "locked.yaml")
	if err := os.WriteFile(locked, []byte("version: 1\n"), 0o000); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(locked); err != nil {
		files[locked] = "permission denied"
	} else {
		t.Log("running as root: the permission case is not covered")
	}
	return files
}

// TestCheck_UnreadableFileIsAProblem checks that a file that cannot be read
// is reported with its path in every format, not as a Go error on stderr,
// and that the other files are still checked.
func TestCheck_UnreadableFileIsAProblem(t *testing.T) {
	inRoot(t)
	files := unreadable(t)
	for _, format := range []string{"text", "json", "github"} {
		for file, reason := range files {
			code, out, errOut := gobridge(t, "check", "--format", format, file, "testdata/config/unused-sender.yaml")
			if code != exitFailure {
				t.Errorf("%s %s: exit %d, want %d", format, file, code, exitFailure)
			}
			if strings.Contains(errOut, "gobridge:") {
				t.Errorf("%s %s: a Go error on stderr: %q", format, file, errOut)
			}
			if !strings.Contains(out, reason) || !strings.Contains(out, "unused-sender") {
				t.Errorf("%s %s: output lacks %q or the other file's problem:\n%s", format, file, reason, out)
			}
			var line string
			switch format {
			case "text":
				line = file + ": file: cannot read the config: " + reason + "\n"
			case "json":
				var got []map[string]any
				if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 {
					t.Fatalf("%s: %v\n%s", file, err, out)
				}
				if got[0]["file"] != file || got[0]["rule"] != "file" || got[0]["line"] != 0.0 || got[0]["severity"] != "error" {
					t.Errorf("json %s: %v", file, got[0])
				}
				continue
			case "github":
				line = "::error file=" + strings.ReplaceAll(file, ":", "%3A") + "::file: cannot read the config: " + reason + "\n"
			}
			if !strings.HasPrefix(out, line) {
				t.Errorf("%s: output does not start with %q:\n%s", format, line, out)
			}
		}
	}
}

func TestCheck_PatternWithoutMatchIsAProblem(t *testing.T) {
	inRoot(t)
	code, out, errOut := gobridge(t, "check", "configs/*.yaml", "testdata/config/nothing-*.yml", "[")
	want := "configs/*.yaml: glob: no file matches \"configs/*.yaml\"\n" +
		"testdata/config/nothing-*.yml: glob: no file matches \"testdata/config/nothing-*.yml\"\n" +
		"[: glob: \"[\" is not a valid pattern: syntax error in pattern\n"
	if code != exitFailure || out != want {
		t.Errorf("exit %d, output:\n%s\nwant:\n%s%s", code, out, want, errOut)
	}
}

// TestCheck_LiteralNameWithGlobCharacters checks that an existing file is
// used as named even when its name reads as a pattern.
func TestCheck_LiteralNameWithGlobCharacters(t *testing.T) {
	inRoot(t)
	data, err := os.ReadFile("testdata/config/unused-sender.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "line[7].yaml")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := gobridge(t, "check", file)
	if code != exitOK || !strings.HasPrefix(out, file+":16:9: unused-sender: warning: ") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// TestCheck_GitHubAnnotations checks the workflow command format and its
// escaping: ":" and "," in the file property, "%" in the message.
func TestCheck_GitHubAnnotations(t *testing.T) {
	inRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "plant:7,line.yaml")
	cfg, err := os.ReadFile("testdata/config/multi-problem.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(cfg, "percent%key: 1\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := gobridge(t, "check", "--format", "github", file)
	if code != exitFailure {
		t.Fatalf("exit %d", code)
	}
	prop := strings.NewReplacer(":", "%3A", ",", "%2C").Replace(file)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	text := strings.Split(strings.TrimSuffix(golden(t, "multi-problem"), "\n"), "\n")
	if len(lines) != len(text)+1 {
		t.Fatalf("%d annotations for %d problems + 1:\n%s", len(lines), len(text), out)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "::error file="+prop+",line=") && !strings.HasPrefix(l, "::warning file="+prop+",line=") {
			t.Errorf("annotation %q: want ::error or ::warning with file=%s", l, prop)
		}
	}
	if want := "::error file=" + prop + ",line=1,col=10::version: version must be 1 (the only config version); got 3"; lines[0] != want {
		t.Errorf("first annotation %q, want %q", lines[0], want)
	}
	if !strings.Contains(out, `unknown key "percent%25key"`) {
		t.Errorf("%% not escaped in the message:\n%s", out)
	}
}

func TestCheck_ReportsExpressionErrors(t *testing.T) {
	inRoot(t)
	path := filepath.Join(t.TempDir(), "expr.yaml")
	cfg := `version: 1
bridge: {id: test}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
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
	code, out, _ := gobridge(t, "check", path)
	if code != exitFailure || !strings.HasPrefix(out, path+":13:15: processor: routes[0].processors[0].expr: ") {
		t.Fatalf("exit %d, output:\n%s", code, out)
	}
}

// TestCheck_ReportsWhatASenderRefuses checks that check builds each sender
// as run does and reports, at the sender, what its constructor refuses and
// no routes rule saw: an SQS attribute name SQS refuses, an SQS queue with
// no region to be found; and header values with a control character, each
// at its value.
func TestCheck_ReportsWhatASenderRefuses(t *testing.T) {
	inRoot(t)
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	path := filepath.Join(t.TempDir(), "senders.yaml")
	cfg := `version: 1
bridge: {id: test}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: q, type: sqs, options: {queue_url: "http://127.0.0.1:1/000000000000/q", region: eu-west-1, attributes: {"AWS.site": x}}}
  - {id: h, type: http, options: {url: "http://127.0.0.1:1/in", headers: {X-A: "a\u0001b", X-B: "b\n{topic}"}}}
  - {id: r, type: sqs, options: {queue_url: "http://127.0.0.1:1/000000000000/r"}}
routes:
  - {id: a, receiver: edge, topic: "a", sender: q, processors: [{type: idempotency_key, hash: true}], policy: {on_expired: drop, on_permanent_failure: drop}}
  - {id: b, receiver: edge, topic: "b", sender: h, processors: [{type: idempotency_key, hash: true}], policy: {on_expired: drop, on_permanent_failure: drop}}
  - {id: c, receiver: edge, topic: "c", sender: r, processors: [{type: idempotency_key, hash: true}], policy: {on_expired: drop, on_permanent_failure: drop}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := gobridge(t, "check", path)
	for _, want := range []string{
		path + `:6:5: sender: senders[0]: sqs sender "q": attribute "AWS.site": names starting with AWS. or Amazon. are reserved`,
		// Both headers, each at its value (the sender stopped at the first).
		path + `:7:80: option: senders[1].options.headers.X-A: the value holds a control character other than tab, which no HTTP request can carry`,
		path + `:7:97: option: senders[1].options.headers.X-B: the value holds a control character other than tab, which no HTTP request can carry`,
		path + `:8:5: sender: senders[2]: sqs sender "r": no region: set options.region or AWS_REGION`,
	} {
		if code != exitFailure || !strings.Contains(out, want+"\n") {
			t.Errorf("exit %d, want %s in the output:\n%s", code, want, out)
		}
	}
}

// TestCheck_ReportsADynamoDBStoreWithoutRegion: a DynamoDB outbox in AWS
// (no endpoint) with no region in the options or the environment passed
// check, and run then refused to start ("Missing Region"). check makes the
// store's client as run does, in its own environment.
func TestCheck_ReportsADynamoDBStoreWithoutRegion(t *testing.T) {
	inRoot(t)
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	path := filepath.Join(t.TempDir(), "dynamodb.yaml")
	cfg := `version: 1
bridge: {id: test}
stores:
  outbox: {type: dynamodb, options: {table: gobridge_outbox}}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "a"}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: a, receiver: edge, topic: "a", sender: out, delivery_mode: shared_outbox, session: {id: s}}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	want := path + ":4:11: store: stores.outbox: dynamodb: no region: set options.region or AWS_REGION\n"
	if code, out, _ := gobridge(t, "check", path); code != exitFailure || !strings.Contains(out, want) {
		t.Errorf("exit %d, want %s in the output:\n%s", code, want, out)
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	if code, out, _ := gobridge(t, "check", path); code != exitOK {
		t.Errorf("with AWS_REGION: exit %d:\n%s", code, out)
	}
}
