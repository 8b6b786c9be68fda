package listener

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"golang.org/x/crypto/bcrypt"

	"github.com/gobridge/gobridge/receivers/internal/testsink"
	"github.com/gobridge/gobridge/receivers/internal/testtls"
)

func hashOf(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// refused reports whether a paho client configured by configure fails to
// connect to url.
// probes numbers the client IDs of refused's probes: each is its own
// client, so that a probe of one user is not refused for holding the ID of
// another user's session that the broker has not dropped yet.
var probes atomic.Int64

func refused(t *testing.T, url string, configure func(*paho.ClientOptions)) bool {
	t.Helper()
	opts := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("probe-%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), probes.Add(1))).
		SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	if configure != nil {
		configure(opts)
	}
	c := paho.NewClient(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("connect got no answer within 10s")
	}
	if tok.Error() == nil {
		c.Disconnect(0)
		return false
	}
	return true
}

func TestListener_Users(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{{Username: "press-1", Password: "s3cret"}, {Username: "press-2", PasswordHash: hashOf(t, "hashed")}}
	})
	user := func(name, pw string) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) { o.SetUsername(name).SetPassword(pw) }
	}
	for name, c := range map[string]struct {
		configure func(*paho.ClientOptions)
		refused   bool
	}{
		"anonymous (users are set)": {nil, true},
		"wrong password":            {user("press-1", "wrong"), true},
		"empty password":            {user("press-1", ""), true},
		"unknown user":              {user("nobody", "s3cret"), true},
		"wrong password for a hash": {user("press-2", "s3cret"), true},
		"right password":            {user("press-1", "s3cret"), false},
		"right password for a hash": {user("press-2", "hashed"), false},
		"another user's password":   {user("press-2", "s3cret"), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := refused(t, b.url, c.configure); got != c.refused {
				t.Fatalf("refused = %v, want %v", got, c.refused)
			}
		})
	}
}

func TestListener_DeniedPublishIsAckedAndDiscarded(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{{Username: "press-1", Password: "pw", ACL: ACL{Publish: []string{"factory/press-1/#"}}}}
	})
	pub := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press-1").SetPassword("pw") })
	for qos := range byte(3) {
		// Acknowledged (the publisher's token completes without error and
		// the connection stays up), but not handed to the sink.
		waitToken(t, pub.Publish("factory/press-2/telemetry", qos, false, "forged"))
	}
	waitToken(t, pub.Publish("factory/press-1/telemetry", 1, false, "own"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "own" {
		t.Fatalf("the sink got %q: a denied publication went through", d.Msg.Payload)
	}
	if s := b.l.Stats(); s.Denied != 3 || s.Received != 1 {
		t.Fatalf("stats = %+v", s)
	}
	if !pub.IsConnectionOpen() {
		t.Fatal("the publisher was disconnected for a denied publication")
	}
}

// TestListener_PublishToReservedTopicIsDenied: mochi drops a PUBLISH to
// $SYS/... (or to a bare $share/GROUP) before OnPublish without answering
// it, so a QoS 1/2 publisher's in-flight slot was held forever. It is
// denied like any publication outside the ACL: acknowledged, discarded,
// counted.
func TestListener_PublishToReservedTopicIsDenied(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), nil)
	pub := publisher(t, b.url, nil)
	for _, topic := range []string{"$SYS/broker/uptime", "$share/g"} {
		for qos := range byte(3) {
			waitToken(t, pub.Publish(topic, qos, false, "spoofed"))
		}
	}
	waitToken(t, pub.Publish("factory/1/x", 1, false, "after"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "after" {
		t.Fatalf("the sink got %q", d.Msg.Payload)
	}
	if s := b.l.Stats(); s.Denied != 6 || s.Received != 1 {
		t.Fatalf("stats = %+v, want 6 denied and 1 received", s)
	}
}

func TestListener_AnonymousACL(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Listen, o.AllowAnonymous = "0.0.0.0:0", true
		o.Anonymous.Publish = []string{"factory/public/#"}
	})
	pub := publisher(t, b.url, nil)
	waitToken(t, pub.Publish("factory/line-1/telemetry", 1, false, "private"))
	waitToken(t, pub.Publish("factory/public/x", 1, false, "public"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "public" {
		t.Fatalf("the sink got %q first", d.Msg.Payload)
	}
	if s := b.l.Stats(); s.Denied != 1 {
		t.Fatalf("stats = %+v", s)
	}
}

func TestListener_SubscribeOutsideACLIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{
			{Username: "plain", Password: "pw"},
			{Username: "viewer", Password: "pw", ACL: ACL{Subscribe: []string{"factory/+/status"}}},
		}
	})
	granted := func(user, filter string) byte {
		t.Helper()
		c := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername(user).SetPassword("pw") })
		tok := c.Subscribe(filter, 1, nil)
		waitToken(t, tok)
		return tok.(*paho.SubscribeToken).Result()[filter]
	}
	for _, c := range []struct {
		user, filter string
		want         byte
	}{
		{"plain", "#", 0x80},
		{"plain", "factory/#", 0x80},
		{"viewer", "#", 0x80},
		{"viewer", "factory/+/status", 1},
		{"viewer", "factory/line-1/status", 1},
		{"viewer", "factory/+/telemetry", 0x80},
		{"viewer", "$SYS/#", 0x80},
	} {
		if got := granted(c.user, c.filter); got != c.want {
			t.Errorf("%s subscribing to %s: SUBACK %#x, want %#x", c.user, c.filter, got, c.want)
		}
	}
}

func TestListener_ClientCertificateNamesTheUser(t *testing.T) {
	t.Parallel()
	files := testtls.Write(t)
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Listen = "0.0.0.0:0"
		o.TLS = files.Server(t, true)
		o.Users = []User{{Username: testtls.ClientCN, ACL: ACL{Publish: []string{"factory/" + testtls.ClientCN + "/#"}}}}
	})
	url := b.url
	if !refused(t, url, func(o *paho.ClientOptions) { o.SetTLSConfig(files.Client(t, false)) }) {
		t.Fatal("a client without a certificate connected")
	}
	if !refused(t, url, func(o *paho.ClientOptions) {
		o.SetTLSConfig(files.Client(t, false)).SetUsername(testtls.ClientCN) // no certificate, no password
	}) {
		t.Fatal("a certificate-only user connected by its name alone")
	}
	pub := publisher(t, url, func(o *paho.ClientOptions) { o.SetTLSConfig(files.Client(t, true)) })
	waitToken(t, pub.Publish("factory/other/x", 1, false, "outside its ACL"))
	waitToken(t, pub.Publish("factory/"+testtls.ClientCN+"/x", 1, false, "its own"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "its own" {
		t.Fatalf("the sink got %q: the certificate's user ACL was not applied", d.Msg.Payload)
	}
}

// TestListener_WillOutsideACLIsRefused: a will is checked like a publication
// when the client connects, since nothing checks it when it is published.
func TestListener_WillOutsideACLIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{{Username: "press-1", Password: "pw", ACL: ACL{Publish: []string{"factory/press-1/#"}}}}
	})
	login := func(o *paho.ClientOptions) { o.SetUsername("press-1").SetPassword("pw") }
	if !refused(t, b.url, func(o *paho.ClientOptions) { login(o); o.SetWill("factory/press-2/status", "gone", 1, false) }) {
		t.Fatal("a will outside the publish ACL was accepted")
	}
	// A will topic is a topic name: with a wildcard it would reach the
	// subscribers as a PUBLISH no MQTT client may send.
	for _, topic := range []string{"factory/press-1/+", "factory/press-1/#"} {
		if !refused(t, b.url, func(o *paho.ClientOptions) { login(o); o.SetWill(topic, "gone", 1, false) }) {
			t.Fatalf("a will on %q (not a topic name) was accepted", topic)
		}
	}
	if refused(t, b.url, func(o *paho.ClientOptions) { login(o); o.SetWill("factory/press-1/status", "gone", 1, true) }) {
		t.Fatal("a retained will inside the publish ACL was refused")
	}
}

// TestListener_SetUsers changes the users of a running listener: an
// unchanged user stays connected and its new ACL applies to its next
// publication; a removed user and a user whose password changed are
// disconnected and cannot connect again with the old password; a new user
// can connect.
func TestListener_SetUsers(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{{Username: "kept", Password: "pw"}, {Username: "removed", Password: "pw"}, {Username: "changed", Password: "pw"}}
	})
	user := func(name, pw string) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) { o.SetUsername(name).SetPassword(pw) }
	}
	lost := func(name string) (paho.Client, chan struct{}) {
		ch := make(chan struct{})
		c := publisher(t, b.url, func(o *paho.ClientOptions) {
			user(name, "pw")(o)
			o.SetConnectionLostHandler(func(paho.Client, error) { close(ch) })
		})
		return c, ch
	}
	kept, keptLost := lost("kept")
	_, removedLost := lost("removed")
	_, changedLost := lost("changed")
	err := b.l.SetUsers([]User{
		{Username: "kept", Password: "pw", ACL: ACL{Publish: []string{"factory/kept/#"}}},
		{Username: "changed", Password: "new"},
		{Username: "added", Password: "pw"},
	}, ACL{}, false)
	if err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan struct{}{"removed": removedLost, "changed": changedLost} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s user still connected 10s after SetUsers", name)
		}
	}
	waitToken(t, kept.Publish("factory/other/x", 1, false, "denied now"))
	waitToken(t, kept.Publish("factory/kept/x", 1, false, "allowed"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "allowed" {
		t.Fatalf("the sink got %q: the new ACL did not apply", d.Msg.Payload)
	}
	select {
	case <-keptLost:
		t.Fatal("the unchanged user lost its connection")
	default:
	}
	for name, c := range map[string]struct {
		configure func(*paho.ClientOptions)
		refused   bool
	}{
		"removed user":          {user("removed", "pw"), true},
		"changed, old password": {user("changed", "pw"), true},
		"changed, new password": {user("changed", "new"), false},
		"added user":            {user("added", "pw"), false},
	} {
		if got := refused(t, b.url, c.configure); got != c.refused {
			t.Errorf("%s: refused = %v, want %v", name, got, c.refused)
		}
	}
	if err := b.l.SetUsers([]User{{Username: "x", Password: "a", PasswordHash: "b"}}, ACL{}, false); err == nil {
		t.Error("SetUsers took an invalid user")
	}
	waitToken(t, kept.Publish("factory/kept/x", 1, false, "still"))
	if d := b.sink.Next(t); string(d.Msg.Payload) != "still" {
		t.Fatalf("an invalid SetUsers changed the users: the sink got %q", d.Msg.Payload)
	}
}

// TestListener_AnotherUserCannotTakeOverASession: a persistent session
// holds what its subscriptions queued while its client was away. A client
// of another identity connecting with the same client ID must not inherit
// it (and with it messages its own ACL would never let it subscribe to),
// nor kick the owner off: it is refused.
func TestListener_AnotherUserCannotTakeOverASession(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.Users = []User{
			{Username: "viewer", Password: "pw", ACL: ACL{Subscribe: []string{"factory/secret/#"}}},
			{Username: "press", Password: "pw"}, // publishes factory/#, subscribes to nothing
		}
	})
	clientID := "shared-" + strings.ReplaceAll(t.Name(), "/", "-")
	as := func(user string) func(*paho.ClientOptions) {
		return func(o *paho.ClientOptions) {
			o.SetUsername(user).SetPassword("pw").SetClientID(clientID).SetCleanSession(false)
		}
	}
	viewer := publisher(t, b.url, as("viewer"))
	waitToken(t, viewer.Subscribe("factory/secret/#", 1, nil))
	viewer.Disconnect(100)

	press := publisher(t, b.url, func(o *paho.ClientOptions) { o.SetUsername("press").SetPassword("pw") })
	waitToken(t, press.Publish("factory/secret/recipe", 1, false, "for the viewer only"))
	testsink.Eventually(t, "the message queued for the viewer's session", func() bool {
		cl, ok := b.l.srv.Clients.Get(clientID)
		return ok && cl.State.Inflight.Len() == 1
	})

	got := make(chan string, 1)
	opts := paho.NewClientOptions().AddBroker(b.url).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			select {
			case got <- m.Topic():
			default:
			}
		})
	as("press")(opts)
	intruder := paho.NewClient(opts)
	tok := intruder.Connect()
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatal("connect got no answer within 10s")
	}
	if tok.Error() == nil {
		defer intruder.Disconnect(0)
		select {
		case topic := <-got:
			t.Fatalf("user press took over the viewer's session and received %s", topic)
		case <-time.After(5 * time.Second):
			t.Fatal("user press connected with the client ID of the viewer's session")
		}
	}
	// The owner still gets what was queued for it.
	recv := make(chan string, 1)
	publisher(t, b.url, func(o *paho.ClientOptions) {
		as("viewer")(o)
		o.SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) { recv <- string(m.Payload()) })
	})
	select {
	case p := <-recv:
		if p != "for the viewer only" {
			t.Fatalf("the viewer got %q", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the viewer's queued message was not delivered within 10s")
	}
}
