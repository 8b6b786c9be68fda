package routes_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

// templated is a config whose template fields take ${VAR} values.
const templated = `version: 1
bridge: {id: t}
stores: {outbox: {type: sqlite}}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - id: erp
    type: http
    options:
      url: "https://erp.example/in/{topic.1}?key=${KEY}"
      headers: {Authorization: "Bearer ${KEY}", X-Line: "{topic.1}"}
  - id: q
    type: sqs
    options:
      queue_url: https://sqs.example/1/q.fifo
      message_group_id: "${KEY}"
      attributes: {k: "${KEY}-{topic}"}
routes:
  - id: r
    receiver: edge
    topic: "#"
    sender: erp
    delivery_mode: shared_outbox
    session: {id: s}
    ordering_key: "${KEY}"
    processors:
      - {type: set_headers, headers: {x: "${KEY}"}}
      - {type: idempotency_key, from: "${KEY}{id}"}
      - {type: coalesce, key: "${KEY}"}
`

// TestParse_EnvValuesAreLiteralInTemplates: a secret with braces, expanded
// into a template field, is literal text: it parses, renders as itself, and
// check never quotes it (today it is parsed as placeholders and check
// echoes part of it).
func TestParse_EnvValuesAreLiteralInTemplates(t *testing.T) {
	const key = "s3{payload.x}}{{c}r{et"
	cfg, probs := load(t, templated, map[string]string{"KEY": key})
	for _, p := range probs {
		if strings.Contains(p.Message, "payload.x") || strings.Contains(p.Message, "c}r") {
			t.Errorf("a problem quotes the secret: %s", p)
		}
	}
	if probs.HasErrors() {
		t.Fatalf("problems: %v", probs)
	}
	e := &message.Envelope{ID: "id1", Topic: "plant/line-7"}
	for field, tmpl := range map[string]string{
		"url":                  cfg.Senders[0].Options.URL,
		"headers":              cfg.Senders[0].Options.Headers["Authorization"],
		"message_group_id":     cfg.Senders[1].Options.MessageGroupID,
		"attributes":           cfg.Senders[1].Options.Attributes["k"],
		"ordering_key":         cfg.Routes[0].OrderingKey,
		"set_headers":          cfg.Routes[0].Processors[0].Headers["x"],
		"idempotency_key.from": cfg.Routes[0].Processors[1].From,
		"coalesce.key":         cfg.Routes[0].Processors[2].Key,
	} {
		out, err := mustRender(t, tmpl, e)
		if err != nil || !strings.Contains(out, key) {
			t.Errorf("%s renders %q, %v; want the literal %q", field, out, err, key)
		}
	}
	// Outside template fields the value stays as it is.
	cfg, _ = load(t, strings.Replace(templated, "bridge: {id: t}", "bridge: {id: \"${KEY}\"}", 1), map[string]string{"KEY": key})
	if cfg.Bridge.ID != key {
		t.Errorf("bridge.id = %q", cfg.Bridge.ID)
	}
}

// writeFile writes content to a new file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const withFiles = `version: 1
bridge:
  id: t
  admin: {listen: "0.0.0.0:9090", token_file: %q}
stores: {outbox: {type: sqlite}}
receivers:
  - {id: plant, type: mqtt, options: {broker_urls: ["tcp://127.0.0.1:1883"], username: u, password_file: %q}, topics: [{topic: "#"}]}
  - id: edge
    type: mqtt_listener
    options: {users: [{username: a, password_file: %q}]}
    topics: [{topic: "#"}]
senders:
  - id: erp
    type: http
    options:
      url: https://erp.example/in
      headers: {X-Line: "{topic.1}"}
      headers_file: {Authorization: %q}
routes:
  - {id: r, receiver: edge, topic: "#", sender: erp, processors: [{type: idempotency_key, hash: true}]}
  - {id: r2, receiver: plant, topic: "#", sender: erp, processors: [{type: idempotency_key, hash: true}]}
`

func TestParse_SecretFiles(t *testing.T) {
	dir := t.TempDir()
	tok := writeFile(t, dir, "token", "adm1n-t0ken\n")
	pw := writeFile(t, dir, "pw", "br0ker pw\r\n")
	user := writeFile(t, dir, "user", "us3r")
	auth := writeFile(t, dir, "auth", "Bearer {not a placeholder}\n")
	cfg, probs := load(t, fmt.Sprintf(withFiles, tok, pw, user, auth), nil)
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	o := cfg.Senders[0].Options
	got := []string{cfg.Bridge.Admin.Token.Reveal(), cfg.Receivers[0].Options.Password.Reveal(),
		cfg.Receivers[1].Options.Users[0].Password.Reveal(), o.Headers["Authorization"]}
	want := []string{"adm1n-t0ken", "br0ker pw", "us3r", "Bearer {{not a placeholder}}"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("values %q, want %q", got, want)
	}
	if out, _ := mustRender(t, o.Headers["Authorization"], &message.Envelope{}); out != "Bearer {not a placeholder}" {
		t.Errorf("header renders %q", out)
	}
	if cfg.Bridge.Admin.TokenFile != "" || o.HeadersFile != nil {
		t.Errorf("file fields not cleared after loading: %q %v", cfg.Bridge.Admin.TokenFile, o.HeadersFile)
	}
	// Secrets loaded from files never print, in JSON or YAML either, and
	// the YAML loads again.
	j, _ := json.Marshal(cfg)
	y, _ := yaml.Marshal(cfg)
	if _, probs := load(t, string(y), nil); probs.HasErrors() {
		t.Errorf("marshalled config does not load: %v", probs)
	}
	for _, out := range []string{string(j), string(y), fmt.Sprintf("%v %+v", cfg, cfg.Bridge)} {
		for _, secret := range []string{"adm1n-t0ken", "br0ker pw", "us3r"} {
			if strings.Contains(out, secret) {
				t.Errorf("%q printed: %.200s", secret, out)
			}
		}
	}
}

func TestParse_SecretFileProblems(t *testing.T) {
	dir := t.TempDir()
	ok := writeFile(t, dir, "ok", "x")
	empty := writeFile(t, dir, "empty", "\n\n")
	big := writeFile(t, dir, "big", strings.Repeat("x", routes.MaxSecretFile+1))
	twoLines := writeFile(t, dir, "two", "Bearer a\nX-Evil: 1\n")
	missing := filepath.Join(dir, "missing")
	doc := fmt.Sprintf(withFiles, empty, missing, big, twoLines)
	// A value and its file are exclusive.
	doc = strings.Replace(doc, "username: u, password_file", "username: u, password: p, password_file", 1)
	doc = strings.Replace(doc, "headers: {X-Line:", "headers: {authorization: x, X-Line:", 1)
	_, probs := load(t, doc, nil)
	var got []string
	for _, p := range probs {
		got = append(got, fmt.Sprintf("%d:%d %s", p.Line, p.Column, p.Rule))
		if strings.Contains(p.Message, "X-Evil") {
			t.Errorf("a problem prints the file's content: %s", p)
		}
	}
	want := []string{
		"4:47 file",       // token_file: empty
		"7:119 exclusive", // password and password_file
		"10:52 file",      // users[0].password_file: too big
		"18:37 exclusive", // Authorization in headers and headers_file
	}
	if strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Errorf("problems %v\nwant %v\n%v", got, want, probs)
	}
	doc = strings.Replace(fmt.Sprintf(withFiles, ok, missing, ok, twoLines), "password_file: "+fmt.Sprintf("%q", missing), "password_file: "+fmt.Sprintf("%q", missing), 1)
	_, probs = load(t, doc, nil)
	if len(probs) != 2 || !strings.Contains(probs[0].Message, "no such file") || !strings.Contains(probs[1].Message, "line break") {
		t.Errorf("missing file and two-line header: %v", probs)
	}
	// A directory, a device or a pipe is not read (a pipe would block).
	for _, p := range []string{dir, "/dev/null"} {
		_, probs = load(t, fmt.Sprintf(withFiles, p, ok, ok, ok), nil)
		if len(probs) != 1 || !strings.Contains(probs[0].Message, "not a regular file") {
			t.Errorf("token_file %s: %v", p, probs)
		}
	}
}

// TestCheck_AdminToken: a listener that is not loopback needs a token; a
// token that resolves to "" is no token.
func TestCheck_AdminToken(t *testing.T) {
	base := "version: 1\nbridge:\n  id: t\n  admin: {%s}\nreceivers: [{id: e, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: \"#\"}]}]\n" +
		"senders: [{id: s, type: stdout}]\nroutes: [{id: r, receiver: e, topic: \"#\", sender: s, policy: {on_expired: drop, on_permanent_failure: drop}}]\n"
	dir := t.TempDir()
	tok := writeFile(t, dir, "tok", "x")
	spaced := writeFile(t, dir, "spaced", "x \n")
	for admin, want := range map[string]string{
		`listen: "127.0.0.1:9090"`:                             "",
		`listen: "localhost:9090"`:                             "",
		`listen: "[::1]:9090"`:                                 "",
		`listen: ""`:                                           "",
		`listen: "127.0.0.1:9090", token: "${T:-}"`:            "warning admin-token 4:44",
		`listen: "0.0.0.0:9090", token: "${T:-}"`:              "error admin-token 4:42",
		`listen: "0.0.0.0:9090"`:                               "error admin-token 4:19",
		`listen: ":9090"`:                                      "error admin-token 4:19",
		`listen: "10.1.2.3:9090"`:                              "error admin-token 4:19",
		`listen: "gobridge.plant:9090"`:                        "error admin-token 4:19",
		`listen: "0.0.0.0:9090", token: s3cret`:                "",
		`listen: "0.0.0.0:9090", token_file: "` + tok + `"`:    "",
		`listen: "0.0.0.0:9090", token_file: "` + spaced + `"`: "error admin-token 4:47",
		`listen: "127.0.0.1:9090", token: " s3cret"`:           "error admin-token 4:44",
		`allowed_hosts: [gobridge.plant, "http://x/"]`:         "error allowed-hosts 4:43",
	} {
		_, probs := load(t, fmt.Sprintf(base, admin), nil)
		var got []string
		for _, p := range probs {
			got = append(got, fmt.Sprintf("%s %s %d:%d", p.Severity, p.Rule, p.Line, p.Column))
		}
		if strings.Join(got, "; ") != want {
			t.Errorf("admin {%s}: %v, want %q", admin, probs, want)
		}
	}
}

// TestCheck_HTTPSenderTarget: a message must not choose the target host,
// by the URL or by a templated Host header.
func TestCheck_HTTPSenderTarget(t *testing.T) {
	base := "version: 1\nbridge: {id: t}\nreceivers: [{id: e, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: \"#\"}]}]\n" +
		"senders: [{id: s, type: http, options: {%s}}]\n" +
		"routes: [{id: r, receiver: e, topic: \"#\", sender: s, processors: [{type: idempotency_key, hash: true}], policy: {on_expired: drop, on_permanent_failure: drop}}]\n"
	for opts, want := range map[string]string{
		`url: "https://erp/in/{topic.1}?t={id}"`:                "",
		`url: "https://{payload.host}/in"`:                      "url-host",
		`url: "https://erp{topic.0}/in"`:                        "url-host",
		`url: "https://erp:{payload.port}/in"`:                  "url-host",
		`url: "https://erp/in", headers: {Host: erp.example}`:   "",
		`url: "https://erp/in", headers: {host: "{topic.0}.x"}`: "host-header",
		`url: "https://erp/in", headers: {HOST: "a{{b}}"}`:      "",
		`url: "https://u:{payload.p}@erp/in"`:                   "url-host",
		`url: "https://erp/in", headers: {"X Device": a}`:       "option",
		`url: "https://erp/in", headers: {"X-Gerät": a}`:        "option",
		`url: "https://erp/in", headers: {X-Device-1: a}`:       "",
	} {
		_, probs := load(t, fmt.Sprintf(base, opts), nil)
		var got []string
		for _, p := range probs {
			got = append(got, p.Rule)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("options {%s}: %v, want %q", opts, probs, want)
		}
	}
}

// TestCheck_URLsAreRedacted: a broker or target URL that check quotes
// never shows its password or API key.
func TestCheck_URLsAreRedacted(t *testing.T) {
	doc := "version: 1\nbridge: {id: t}\n" +
		"receivers: [{id: p, type: mqtt, options: {broker_urls: [\"ftp://u:br0kerpw@h:1883\", \"tcp://u:p/w@h:x\"]}, topics: [{topic: \"#\"}]}]\n" +
		"senders: [{id: s, type: http, options: {url: \"ftp://erp/in?api_key=K3yK3y\"}}, {id: q, type: sqs, options: {queue_url: \"sqs://q?token=K3yK3y\"}}]\n" +
		"routes: [{id: r, receiver: p, topic: \"#\", sender: s, policy: {on_expired: drop, on_permanent_failure: drop}}]\n"
	_, probs := load(t, doc, nil)
	if len(probs) < 4 {
		t.Fatalf("want the four URL problems, got %v", probs)
	}
	for _, p := range probs {
		if strings.Contains(p.Message, "br0kerpw") || strings.Contains(p.Message, "K3yK3y") || strings.Contains(p.Message, "p/w") {
			t.Errorf("problem quotes a secret: %s", p)
		}
	}
}

func mustRender(t *testing.T, tmpl string, e *message.Envelope) (string, error) {
	t.Helper()
	tp, err := message.ParseTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	return tp.Render(e, nil)
}

// TestParse_MalformedEnvInASecretIsNotEchoed: a malformed ${...} in a
// secret field is reported without its text, which may be the secret
// itself; elsewhere the message quotes it to help.
func TestParse_MalformedEnvInASecretIsNotEchoed(t *testing.T) {
	for field, echoed := range map[string]bool{"admin: {token: %q}": false, "id: %q": true} {
		doc := "version: 1\nbridge:\n  " + fmt.Sprintf(field, "${s3cr3t-x}") + "\n"
		_, probs := load(t, doc, nil)
		env := 0
		for _, p := range probs {
			if p.Rule != "env" {
				continue
			}
			env++
			if strings.Contains(p.Message, "s3cr3t") != echoed {
				t.Errorf("%s: %s", field, p)
			}
		}
		if env != 1 {
			t.Errorf("%s: %d env problems, want 1: %v", field, env, probs)
		}
	}
}
