package listener

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"
	paho "github.com/eclipse/paho.mqtt.golang"
	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// gate holds the CONNECT of user "viewer" between its authentication and
// mochi registering its session, until release is closed.
type gate struct {
	mochi.HookBase
	held, release chan struct{}
}

func (g *gate) ID() string           { return "gate" }
func (g *gate) Provides(b byte) bool { return b == mochi.OnSessionEstablish }
func (g *gate) OnSessionEstablish(cl *mochi.Client, _ packets.Packet) {
	if string(cl.Properties.Username) == "viewer" {
		close(g.held)
		<-g.release
	}
}

// TestListener_SessionClaimIsAtomic: two identities connect with one
// client ID at once. The second must be refused while the first is
// between its authentication and its session: checking for another
// identity's session only among registered sessions let both through, and
// the later one took the other's session over.
func TestListener_SessionClaimIsAtomic(t *testing.T) {
	t.Parallel()
	b, g := gatedListener(t)
	clientID := "contested-" + strings.ReplaceAll(t.Name(), "/", "-")
	as := func(user string) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) {
			o.SetUsername(user).SetPassword("pw").SetClientID(clientID).SetCleanSession(false)
		}
	}
	viewer := make(chan bool, 1)
	go func() { viewer <- refused(t, b.url, as("viewer")) }()
	<-g.held
	pressRefused := refused(t, b.url, as("press"))
	close(g.release)
	if <-viewer {
		t.Error("the viewer was refused")
	}
	if !pressRefused {
		t.Fatal("user press connected with the client ID the viewer was connecting with")
	}
	if cl, ok := b.l.srv.Clients.Get(clientID); !ok || string(cl.Properties.Username) != "viewer" {
		t.Fatalf("the session is not the viewer's: %v", ok)
	}
}

// TestListener_CapsSubscriptionsPerClient: a client may hold
// MaxSubscriptions topic filters; more get SUBACK 0x80 (MQTT 5: 0x97), and
// subscribing again to one it holds still succeeds.
func TestListener_CapsSubscriptionsPerClient(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{{Username: "press-1", Password: "pw", ACL: ACL{Subscribe: []string{"factory/#"}}}}
	})
	filters := map[string]byte{}
	list := make([]paho5.SubscribeOptions, 0, MaxSubscriptions+1)
	for i := range MaxSubscriptions + 1 {
		filters[fmt.Sprintf("factory/%d/#", i)] = 1
		list = append(list, paho5.SubscribeOptions{Topic: fmt.Sprintf("factory/%d/#", i), QoS: 1})
	}
	c := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press-1").SetPassword("pw") })
	var over string
	tok := c.SubscribeMultiple(filters, nil).(*paho.SubscribeToken)
	waitToken(t, tok)
	granted := 0
	for f, code := range tok.Result() {
		switch code {
		case 1:
			granted++
		case 0x80:
			over = f
		default:
			t.Errorf("SUBACK for %s: %#x", f, code)
		}
	}
	if granted != MaxSubscriptions || over == "" {
		t.Fatalf("%d of %d filters granted, refused %q", granted, len(filters), over)
	}
	held := "factory/0/#"
	if held == over {
		held = "factory/1/#"
	}
	if tok := c.Subscribe(held, 0, nil).(*paho.SubscribeToken); !tok.WaitTimeout(10*time.Second) || tok.Result()[held] != 0 {
		t.Errorf("subscribing again to a held filter: %v", tok.Result())
	}

	c5, _ := client5(t, b, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	sa, err := c5.Subscribe(ctx, &paho5.Subscribe{Subscriptions: list})
	if sa == nil || len(sa.Reasons) != len(list) {
		t.Fatalf("SUBACK %+v, %v", sa, err)
	}
	if got := sa.Reasons[MaxSubscriptions]; got != 0x97 || sa.Reasons[0] != 1 {
		t.Fatalf("MQTT 5 SUBACK reasons: first %#x, last %#x; want 0x01 and 0x97", sa.Reasons[0], got)
	}
}

// sessionOf connects clientID with a persistent session subscribed to
// filter, then disconnects it.
func sessionOf(t *testing.T, b *bundle, clientID, filter string) {
	t.Helper()
	c := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetClientID(clientID).SetCleanSession(false) })
	waitToken(t, c.Subscribe(filter, 1, nil))
	c.Disconnect(0)
}

// subscribed reports whether clientID is among filter's subscribers.
func subscribed(b *bundle, clientID, topic string) bool {
	_, ok := b.l.srv.Topics.Subscribers(topic).Subscriptions[clientID]
	return ok
}

// TestListener_BoundsSessionsPerIdentity: one identity leaves at most
// MaxClients disconnected sessions: connecting under a new client ID drops
// the oldest beyond, subscriptions included.
func TestListener_BoundsSessionsPerIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.MaxClients = 2; o.Anonymous.Subscribe = []string{"factory/#"} })
	id := strings.ReplaceAll(t.Name(), "/", "-")
	for i := range 5 {
		id := fmt.Sprint(id, i)
		sessionOf(t, b, id, "factory/bound/#")
		testsink.Eventually(t, id+" disconnected", func() bool {
			cl, ok := b.l.srv.Clients.Get(id)
			return ok && cl.StopTime() > 0
		})
	}
	kept := 0
	for i := range 5 {
		_, ok := b.l.srv.Clients.Get(fmt.Sprint(id, i))
		if ok {
			kept++
		}
		if ok != subscribed(b, fmt.Sprint(id, i), "factory/bound/x") {
			t.Errorf("session %d: kept %v, subscribed %v", i, ok, !ok)
		}
	}
	if kept > 2 {
		t.Fatalf("%d sessions kept, max_clients 2", kept)
	}
}

// TestListener_ExpiredSessionLeavesNoSubscription: mochi forgets an
// expired session but kept its subscriptions in the topic index for good.
func TestListener_ExpiredSessionLeavesNoSubscription(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) { o.SessionExpiry = time.Second; o.Anonymous.Subscribe = []string{"factory/#"} })
	id := strings.ReplaceAll(t.Name(), "/", "-")
	sessionOf(t, b, id, "factory/expiry/#")
	testsink.Eventually(t, "the session expired", func() bool { _, ok := b.l.srv.Clients.Get(id); return !ok })
	if subscribed(b, id, "factory/expiry/x") {
		t.Fatal("the expired session's subscription is still in the topic index")
	}
}

// TestListener_DisconnectCannotExtendSessionExpiry: an MQTT 5 client may
// set its session expiry again in its DISCONNECT. mochi caps it at
// session_expiry in the CONNECT only: a DISCONNECT asking for 0xFFFFFFFF
// kept the session, its subscriptions and its queue for good.
func TestListener_DisconnectCannotExtendSessionExpiry(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.SessionExpiry = time.Second
		o.Users = []User{{Username: "press-1", Password: "pw", ACL: ACL{Subscribe: []string{"factory/#"}}}}
	})
	c, _ := client5(t, b, 1)
	forever := uint32(0xFFFFFFFF)
	if err := c.Disconnect(&paho5.Disconnect{Properties: &paho5.DisconnectProperties{SessionExpiryInterval: &forever}}); err != nil {
		t.Fatal(err)
	}
	id := "v5-" + strings.ReplaceAll(t.Name(), "/", "-")
	testsink.Eventually(t, "the session expired after session_expiry (1s)", func() bool { _, ok := b.l.srv.Clients.Get(id); return !ok })
}

// gatedListener starts a listener of users viewer and press (password pw)
// on factory/# whose CONNECTs wait at the gate it returns.
func gatedListener(t *testing.T) (*bundle, *gate) {
	t.Helper()
	sink := testsink.New(true)
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}, Users: []User{
		{Username: "viewer", Password: "pw"}, {Username: "press", Password: "pw"},
	}}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{held: make(chan struct{}), release: make(chan struct{})}
	l.extraHooks = append(l.extraHooks, g)
	return start(t, l, sink, nil), g
}
