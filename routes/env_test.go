package routes_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gobridge/gobridge/routes"
)

const minimal = `version: 1
bridge:
  id: %s
stores:
  outbox:
    type: sqlite
receivers:
  - id: edge
    type: mqtt_listener
    options: {allow_anonymous: true}
    topics:
      - topic: "#"
        qos: %s
senders:
  - id: out
    type: stdout
routes:
  - id: all
    receiver: edge
    topic: "#"
    sender: out
    delivery_mode: shared_outbox
    session:
      id: edge
    policy:
      send_timeout: %s
`

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func load(t *testing.T, doc string, env map[string]string) (*routes.Config, routes.Problems) {
	t.Helper()
	cfg, probs, err := routes.ParseWithEnv(strings.NewReader(doc), "test.yaml", envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	return cfg, probs
}

func TestParse_ExpandsEnv(t *testing.T) {
	doc := fmt.Sprintf(minimal, "${ID}", "${QOS:-2}", `"${TIMEOUT:-5s}"`)
	cfg, probs := load(t, doc, map[string]string{"ID": "line-7", "TIMEOUT": "12s"})
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	if cfg.Bridge.ID != "line-7" {
		t.Errorf("bridge.id = %q", cfg.Bridge.ID)
	}
	if got := *cfg.Receivers[0].Topics[0].QoS; got != 2 {
		t.Errorf("qos = %d, want 2 from the default", got)
	}
	if got := cfg.Routes[0].Policy.SendTimeout.String(); got != "12s" {
		t.Errorf("send_timeout = %s", got)
	}
}

func TestParse_EnvCannotInjectStructure(t *testing.T) {
	evil := "x\nreceivers: []\n"
	doc := fmt.Sprintf(minimal, "${ID}", "1", "5s")
	cfg, probs := load(t, doc, map[string]string{"ID": evil})
	if probs.HasErrors() {
		t.Fatalf("problems: %v", probs)
	}
	if cfg.Bridge.ID != evil || len(cfg.Receivers) != 1 {
		t.Fatalf("expansion changed the structure: id %q, %d receivers", cfg.Bridge.ID, len(cfg.Receivers))
	}
	// A value that looks like YAML null or a number stays a string.
	cfg, _ = load(t, doc, map[string]string{"ID": "null"})
	if cfg.Bridge.ID != "null" {
		t.Fatalf("bridge.id = %q, want the literal string null", cfg.Bridge.ID)
	}
}

func TestParse_EnvErrors(t *testing.T) {
	doc := fmt.Sprintf(minimal, "${MISSING}", "${ALSO_MISSING}", "${BROKEN")
	_, probs := load(t, doc, nil)
	var rules []string
	for _, p := range probs {
		rules = append(rules, fmt.Sprintf("%d:%s", p.Line, p.Rule))
	}
	if got, want := strings.Join(rules, " "), "3:env 13:env 26:env"; got != want {
		t.Fatalf("problems %q, want %q\n%v", got, want, probs)
	}
	if !strings.Contains(probs[0].Message, "MISSING") {
		t.Errorf("message does not name the variable: %s", probs[0].Message)
	}
	// $${ escapes a literal ${.
	cfg, probs := load(t, fmt.Sprintf(minimal, "a-$${X}", "1", "1s"), nil)
	if probs.HasErrors() || cfg.Bridge.ID != "a-${X}" {
		t.Fatalf("id %q, problems %v", cfg.Bridge.ID, probs)
	}
}

func TestDuration_RejectsBareNumbers(t *testing.T) {
	for _, in := range []string{"5", "1.5", "-1s", "soon"} {
		var d routes.Duration
		if err := yaml.Unmarshal([]byte(in), &d); err == nil {
			t.Errorf("Unmarshal(%q) = %v, want an error", in, d)
		}
	}
	var d routes.Duration
	if err := yaml.Unmarshal([]byte("1m30s"), &d); err != nil || d.String() != "1m30s" {
		t.Fatalf("Unmarshal(1m30s) = %v, %v", d, err)
	}
	out, err := yaml.Marshal(struct{ D routes.Duration }{d})
	if err != nil || strings.TrimSpace(string(out)) != "d: 1m30s" {
		t.Fatalf("Marshal = %q, %v", out, err)
	}
}

func TestSecret_NeverPrints(t *testing.T) {
	s := routes.Secret("hunter2")
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "token", s)
	out := buf.String() + fmt.Sprintf("%v %s %+v %#v", s, s, s, s)
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "REDACTED") {
		t.Fatalf("secret leaked or not redacted: %s", out)
	}
	if s.Reveal() != "hunter2" {
		t.Fatal("Reveal lost the value")
	}
}

func TestConfig_Position(t *testing.T) {
	cfg, _ := load(t, fmt.Sprintf(minimal, "x", "1", "5s"), nil)
	for path, want := range map[string][2]int{
		"routes[0].policy.send_timeout": {26, 21},
		"routes[0].policy.ttl":          {26, 7}, // absent: the policy block
		"routes[0].session.id":          {24, 11},
		"routes[5].topic":               {18, 3}, // absent route: the list
		"":                              {1, 1},
	} {
		l, c := cfg.Position(path)
		if l != want[0] || c != want[1] {
			t.Errorf("Position(%q) = %d:%d, want %d:%d", path, l, c, want[0], want[1])
		}
	}
	p := cfg.Errorf("routes[0].policy.send_timeout", "expr", "bad %s", "thing")
	if got := p.String(); got != "test.yaml:26:21: expr: bad thing" {
		t.Errorf("problem = %q", got)
	}
}
