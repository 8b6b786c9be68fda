package listener

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	paho5 "github.com/eclipse/paho.golang/paho"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// client5 connects an MQTT 5 client (eclipse/paho.golang) to b as user
// press-1 and returns it with the CONNACK.
func client5(t *testing.T, b *bundle, expiry uint32) (*paho5.Client, *paho5.Connack) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(b.url, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	c := paho5.NewClient(paho5.ClientConfig{Conn: conn, ClientID: "v5-" + strings.ReplaceAll(t.Name(), "/", "-")})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ack, err := c.Connect(ctx, &paho5.Connect{
		ClientID: "v5-" + strings.ReplaceAll(t.Name(), "/", "-"), KeepAlive: 30, CleanStart: true,
		Username: "press-1", UsernameFlag: true, Password: []byte("pw"), PasswordFlag: true,
		Properties: &paho5.ConnectProperties{SessionExpiryInterval: &expiry},
	})
	if err != nil {
		t.Fatalf("connect: %v (%+v)", err, ack)
	}
	t.Cleanup(func() { _ = c.Disconnect(&paho5.Disconnect{}) })
	return c, ack
}

func TestListener_MQTT5ReasonCodes(t *testing.T) {
	t.Parallel()
	b := setup(t, testsink.New(true), func(o *Options) {
		o.MaxPayloadBytes, o.SessionExpiry = 4096, 10*time.Minute
		o.Users = []User{{Username: "press-1", Password: "pw", ACL: ACL{Publish: []string{"factory/press-1/#"}}}}
	})
	c, ack := client5(t, b, 86400)

	t.Run("CONNACK announces the packet limit and caps the session expiry", func(t *testing.T) {
		p := ack.Properties
		if p == nil || p.MaximumPacketSize == nil || *p.MaximumPacketSize != 4096+PacketOverhead {
			t.Fatalf("CONNACK maximum packet size = %v, want %d", p, 4096+PacketOverhead)
		}
		if p.SessionExpiryInterval == nil || *p.SessionExpiryInterval != 600 {
			t.Fatalf("CONNACK session expiry = %v, want 600 (capped from 86400)", p.SessionExpiryInterval)
		}
	})
	publish := func(topic string, size int, qos byte) byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		resp, err := c.Publish(ctx, &paho5.Publish{Topic: topic, QoS: qos, Payload: []byte(strings.Repeat("x", size))})
		if resp == nil {
			t.Fatalf("publish to %s: %v", topic, err)
		}
		return resp.ReasonCode
	}
	t.Run("denied publish: 0x87", func(t *testing.T) {
		for qos := byte(1); qos <= 2; qos++ {
			for _, topic := range []string{"factory/press-2/x", "$SYS/x"} {
				if rc := publish(topic, 10, qos); rc != 0x87 {
					t.Fatalf("%s, QoS %d: reason %#x, want 0x87", topic, qos, rc)
				}
			}
		}
	})
	t.Run("payload over max_payload_bytes: 0x95, truncated to the sink", func(t *testing.T) {
		for qos := byte(1); qos <= 2; qos++ {
			if rc := publish("factory/press-1/big", 5000, qos); rc != 0x95 {
				t.Fatalf("QoS %d: reason %#x, want 0x95", qos, rc)
			}
			if d := b.sink.Next(t); !d.Msg.Truncated || d.Msg.Size != 5000 || len(d.Msg.Payload) != receivers.TruncatedBytes {
				t.Fatalf("the sink got truncated=%v size=%d", d.Msg.Truncated, d.Msg.Size)
			}
		}
	})
	t.Run("accepted publish: success", func(t *testing.T) {
		if rc := publish("factory/press-1/ok", 4096, 1); rc != 0 {
			t.Fatalf("reason %#x", rc)
		}
		if d := b.sink.Next(t); d.Msg.Truncated || d.Msg.Size != 4096 {
			t.Fatalf("the sink got %+v", d.Msg)
		}
	})
	t.Run("denied subscription: 0x87", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		sa, err := c.Subscribe(ctx, &paho5.Subscribe{Subscriptions: []paho5.SubscribeOptions{{Topic: "#", QoS: 1}}})
		if sa == nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 0x87 {
			t.Fatalf("SUBACK %+v, %v; want reason 0x87", sa, err)
		}
	})
	if s := b.l.Stats(); s.Denied != 4 || s.TooLarge != 2 {
		t.Fatalf("stats = %+v", s)
	}
}
