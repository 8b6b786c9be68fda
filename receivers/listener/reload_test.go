package listener

import (
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// TestListener_SetUsersReachesAConnectInProgress: a client authenticated
// under the old users whose session mochi has not registered yet (a
// bcrypt login waits its turn for seconds under a flood) is not among the
// sessions SetUsers went through: a removed user connected after the
// reload and kept its connection, under the publish ACL of a certificate
// name that is no user (the receiver's topics).
func TestListener_SetUsersReachesAConnectInProgress(t *testing.T) {
	t.Parallel()
	b, g := gatedListener(t)

	lost := make(chan struct{})
	connected := make(chan paho.Token, 1)
	c := paho.NewClient(paho.NewClientOptions().AddBroker(b.url).SetClientID("viewer-" + t.Name()).SetUsername("viewer").SetPassword("pw").
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
		SetConnectionLostHandler(func(paho.Client, error) { close(lost) }))
	go func() { connected <- c.Connect() }()
	<-g.held // authenticated, session not registered yet
	if err := b.l.SetUsers([]User{{Username: "press", Password: "pw"}}, ACL{}, false); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	tok := <-connected
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("connect got no answer within 10s")
	}
	if tok.Error() != nil {
		return // refused: fine
	}
	defer c.Disconnect(0)
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the removed user is still connected 10s after SetUsers")
	}
}

// TestListener_SetUsersDropsWhatANarrowedACLNoLongerAllows: a persistent
// session holds the messages its subscriptions matched while its client
// was away. After a reload took the topic out of the user's subscribe ACL,
// the client reconnected and got them all the same (mochi resends a
// session's queue without asking the ACL; only new deliveries are checked).
func TestListener_SetUsersDropsWhatANarrowedACLNoLongerAllows(t *testing.T) {
	t.Parallel()
	viewer := User{Username: "viewer", Password: "pw", ACL: ACL{Publish: []string{}, Subscribe: []string{"factory/#"}}}
	press := User{Username: "press", Password: "pw"}
	b := setup(t, testsink.New(true), func(o *Options) { o.Users = []User{viewer, press} })
	clientID := "viewer-" + strings.ReplaceAll(t.Name(), "/", "-")
	as := func(o *paho.ClientOptions) {
		o.SetUsername("viewer").SetPassword("pw").SetClientID(clientID).SetCleanSession(false)
	}
	v := publisher(t, b.url, as)
	waitToken(t, v.Subscribe("factory/secret/#", 1, nil))
	waitToken(t, v.Subscribe("factory/public/#", 1, nil))
	v.Disconnect(100)
	p := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press").SetPassword("pw") })
	waitToken(t, p.Publish("factory/secret/recipe", 1, false, "secret"))
	testsink.Eventually(t, "the message queued for the viewer's session", func() bool {
		cl, ok := b.l.srv.Clients.Get(clientID)
		return ok && cl.State.Inflight.Len() == 1
	})

	viewer.Subscribe = []string{"factory/public/#"}
	if err := b.l.SetUsers([]User{viewer, press}, ACL{}, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	publisher(t, b.url, func(o *paho.ClientOptions) {
		as(o)
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	})
	// The session's queue is resent right after the CONNACK, before this.
	waitToken(t, p.Publish("factory/public/news", 1, false, "public"))
	select {
	case m := <-got:
		if m != "public" {
			t.Fatalf("the viewer got %q first, queued before its ACL was narrowed", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the viewer got nothing within 10s")
	}
}
