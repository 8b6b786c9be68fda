package listener

import (
	"strings"
	"testing"

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
	sink := testsink.New(true)
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}, Users: []User{
		{Username: "viewer", Password: "pw"}, {Username: "press", Password: "pw"},
	}}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{held: make(chan struct{}), release: make(chan struct{})}
	l.extraHooks = append(l.extraHooks, g)
	b := start(t, l, sink, nil)
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
