package routes_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

const listenDoc = `version: 1
bridge: {id: test, admin: {listen: "%s", token: secret}}
receivers:
  - {id: web, type: http_listener, options: {listen: "%s", token: secret}, topics: [{topic: a}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: a, receiver: web, topic: a, sender: out, policy: {on_expired: drop, on_permanent_failure: drop}}
`

// listenProblems returns the listen problems of a config whose admin server
// and http_listener listen on admin and web.
func listenProblems(t *testing.T, admin, web string) []string {
	t.Helper()
	_, probs := load(t, fmt.Sprintf(listenDoc, admin, web), nil)
	var out []string
	for _, p := range probs {
		if p.Rule == "listen" {
			out = append(out, p.String())
		}
	}
	return out
}

// TestCheck_ListenPortMustBeListenable checks that a port net.Listen
// refuses is a check error, not a failure of run.
func TestCheck_ListenPortMustBeListenable(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:no-such-service"} {
		if _, err := net.Listen("tcp", addr); err == nil {
			t.Fatalf("net.Listen(%q) succeeded; the case is not a mistake", addr)
		}
		if got := listenProblems(t, addr, "127.0.0.1:0"); len(got) != 1 || !strings.Contains(got[0], "bridge.admin.listen") {
			t.Errorf("admin listen %s: listen problems %q, want one at bridge.admin.listen", addr, got)
		}
		if got := listenProblems(t, "127.0.0.1:0", addr); len(got) != 1 || !strings.Contains(got[0], "receivers[0].options.listen") {
			t.Errorf("http_listener listen %s: listen problems %q, want one at receivers[0].options.listen", addr, got)
		}
	}
	for _, addr := range []string{"127.0.0.1:9090", "127.0.0.1:0", "[::1]:9090", ":9090"} {
		if got := listenProblems(t, addr, "127.0.0.1:8080"); len(got) != 0 {
			t.Errorf("admin listen %s: unexpected listen problems %q", addr, got)
		}
	}
}

// TestCheck_ListenConflicts checks that two servers that cannot both bind
// their addresses are reported, not only two identical addresses: a
// wildcard host takes the port on every address, and localhost is a
// loopback address.
func TestCheck_ListenConflicts(t *testing.T) {
	cases := []struct {
		admin, web string
		conflict   bool
	}{
		{"127.0.0.1:9100", "127.0.0.1:9100", true},
		{":9100", "127.0.0.1:9100", true},
		{"0.0.0.0:9100", "[::1]:9100", true},
		{"127.0.0.1:9100", "[::]:9100", true},
		{"localhost:9100", "127.0.0.1:9100", true},
		{"[::1]:9100", "LocalHost:9100", true},
		{"127.0.0.1:9100", "127.0.0.1:9101", false},
		{"127.0.0.1:9100", "127.0.0.2:9100", false},
		{":0", "127.0.0.1:0", false}, // port 0: each gets a free port
		{"127.0.0.1:0", "127.0.0.1:0", false},
	}
	for _, c := range cases {
		got := listenProblems(t, c.admin, c.web)
		if (len(got) > 0) != c.conflict {
			t.Errorf("admin %s, http_listener %s: listen problems %q, want a conflict: %v", c.admin, c.web, got, c.conflict)
		}
	}
}

const keepAliveDoc = `version: 1
bridge: {id: test}
receivers:
  - {id: plant, type: mqtt, options: {broker_urls: ["tcp://127.0.0.1:1883"], keep_alive: "%s"}, topics: [{topic: a}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: a, receiver: plant, topic: a, sender: out, delivery_mode: direct_hold, policy: {on_expired: drop, on_permanent_failure: drop}}
`

// TestCheck_KeepAliveFitsMQTT: MQTT carries the keep-alive as whole
// seconds in 16 bits, and paho truncates and wraps: 500ms and 65536s
// reached Mosquitto as k0 (keep-alive off, which check refuses when written
// as 0s) and 24h as k20864. check reports them at the option.
func TestCheck_KeepAliveFitsMQTT(t *testing.T) {
	for _, ka := range []string{"500ms", "999ms", "65536s", "24h"} {
		_, probs := load(t, fmt.Sprintf(keepAliveDoc, ka), nil)
		var got []string
		for _, p := range probs {
			if strings.Contains(p.String(), "keep_alive") {
				got = append(got, p.String())
			}
		}
		if len(got) != 1 || !strings.Contains(got[0], "receivers[0].options.keep_alive") || !probs.HasErrors() {
			t.Errorf("keep_alive %s: problems %q, want one error at receivers[0].options.keep_alive", ka, got)
		}
	}
	for _, ka := range []string{"1s", "30s", "1500ms", "65535s"} {
		if _, probs := load(t, fmt.Sprintf(keepAliveDoc, ka), nil); probs.HasErrors() {
			t.Errorf("keep_alive %s: unexpected errors %v", ka, probs)
		}
	}
}

const twoReceiversDoc = `version: 1
bridge: {id: test}
receivers:
  - {id: a, type: mqtt, options: {broker_urls: ["%s"]%s}, topics: [{topic: a/#}]}
  - {id: b, type: mqtt, options: {broker_urls: ["%s"]%s}, topics: [{topic: b/#}]}
senders:
  - {id: out, type: stdout}
routes:
  - {id: a, receiver: a, topic: a/#, sender: out, delivery_mode: direct_hold, policy: {on_expired: drop, on_permanent_failure: drop}}
  - {id: b, receiver: b, topic: b/#, sender: out, delivery_mode: direct_hold, policy: {on_expired: drop, on_permanent_failure: drop}}
`

// TestCheck_MQTTReceiversNeedTheirOwnClientID: two mqtt receivers with
// one client id (both defaulting to gobridge-BRIDGE_ID) on one broker
// share one session at the broker: with Mosquitto 2.0.11, receiver b,
// subscribed to b/# only, got the messages of a/# (and b's routes would
// have acknowledged and discarded them as unrouted), and each connection
// kicked the other off. check reports it; other brokers or ids are fine.
func TestCheck_MQTTReceiversNeedTheirOwnClientID(t *testing.T) {
	cases := []struct {
		urlA, optA, urlB, optB string
		want                   bool
	}{
		{"tcp://broker:1883", "", "tcp://broker:1883", "", true},  // both gobridge-test
		{"tcp://broker:1883", "", "mqtt://Broker:1883", "", true}, // the same broker, spelt otherwise
		{"tcp://broker:1883", ", client_id: x", "ws://broker:1883/mqtt", ", client_id: x", true},
		{"tcp://broker:1883", "", "tcp://broker:1883", ", client_id: b", false},
		{"tcp://broker:1883", "", "tcp://other:1883", "", false},
	}
	for _, tc := range cases {
		_, probs := load(t, fmt.Sprintf(twoReceiversDoc, tc.urlA, tc.optA, tc.urlB, tc.optB), nil)
		var got []string
		for _, p := range probs {
			if p.Rule == "client-id" {
				got = append(got, p.String())
			}
		}
		if tc.want && (len(got) != 1 || !strings.Contains(got[0], "receivers[1].options.client_id") || !probs.HasErrors()) {
			t.Errorf("%+v: client-id problems %q, want one error at receivers[1].options.client_id", tc, got)
		}
		if !tc.want && len(got) > 0 {
			t.Errorf("%+v: unexpected %q", tc, got)
		}
	}
}

// TestCheck_BrokerURLNeedsAPort: paho dials a broker URL's host as written
// and takes no default port, so tcp://broker failed every connection
// ("missing port in address") after check passed it. ws:// and wss://
// default to 80 and 443.
func TestCheck_BrokerURLNeedsAPort(t *testing.T) {
	for url, want := range map[string]bool{
		"tcp://broker": true, "ssl://broker": true, "mqtts://[::1]": true, "tcp://broker:": true,
		"tcp://broker:1883": false, "ws://broker/mqtt": false, "wss://broker": false,
	} {
		_, probs := load(t, fmt.Sprintf(twoReceiversDoc, url, "", "tcp://other:1883", ""), nil)
		got := probs.ErrorUnder("receivers[0].options.broker_urls[0]")
		if got != want {
			t.Errorf("%s: error at broker_urls[0] = %v, want %v (%v)", url, got, want, probs)
		}
	}
}

// TestCheck_MQTTTLSNeedsATLSBrokerURL: the MQTT client uses the tls
// settings only for ssl://, tls://, mqtts:// and wss:// brokers; with only
// tcp:// URLs it connected in plain text, the password included, and check
// said "config ok".
func TestCheck_MQTTTLSNeedsATLSBrokerURL(t *testing.T) {
	const tls = ", tls: {insecure_skip_verify: true}"
	for _, tc := range []struct {
		url, opt string
		want     bool
	}{
		{"tcp://broker:1883", tls, true},
		{"ws://broker:8080/mqtt", tls, true},
		{"ssl://broker:8883", tls, false},
		{"wss://broker/mqtt", tls, false},
		{"tcp://broker:1883", "", false},
	} {
		_, probs := load(t, fmt.Sprintf(twoReceiversDoc, tc.url, tc.opt+", client_id: a", "tcp://other:1883", ""), nil)
		if got := probs.ErrorUnder("receivers[0].options.tls"); got != tc.want {
			t.Errorf("%s%s: error at receivers[0].options.tls = %v, want %v (%v)", tc.url, tc.opt, got, tc.want, probs)
		}
	}
}
