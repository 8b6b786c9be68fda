package e2e

import (
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// publisher connects a paho client with a clean session to the broker.
func publisher(t testing.TB, url, id string) paho.Client {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(true).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).SetMaxResumePubInFlight(1000).
		SetWriteTimeout(10 * time.Second)
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("connect publisher to %s: timed out", url)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("connect publisher to %s: %v", url, err)
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c
}

// waitTokens waits for every publish to be acknowledged by the broker.
func waitTokens(t testing.TB, toks []paho.Token, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for i, tok := range toks {
		if !tok.WaitTimeout(time.Until(deadline)) {
			t.Fatalf("publish %d not acknowledged after %s", i, timeout)
		}
		if err := tok.Error(); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
}

// publishAll publishes each (topic, payload) at QoS 1 and waits for the
// broker's acknowledgements.
func publishAll(t *testing.T, c paho.Client, msgs [][2]string, timeout time.Duration) {
	t.Helper()
	toks := make([]paho.Token, 0, len(msgs))
	for _, m := range msgs {
		toks = append(toks, c.Publish(m[0], 1, false, m[1]))
	}
	waitTokens(t, toks, timeout)
}
