package listener

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/gobridge/gobridge/internal/churn"
	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// churnRounds are the two totals the churn tests compare; CHURN_ROUNDS
// raises the second for a soak run.
func churnRounds(t *testing.T) (int, int) {
	n2 := 1500
	if s := os.Getenv("CHURN_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CHURN_ROUNDS: %v", err)
		}
		n2 = n
	}
	return n2 / 5, n2
}

// connectAs311 is an MQTT 3.1.1 CONNECT; clean false asks for a persistent session.
func connectAs311(clientID string, clean bool) []byte {
	flags := byte(0)
	if clean {
		flags = 0x02
	}
	body := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, flags, 0, 60}
	body = binary.BigEndian.AppendUint16(body, uint16(len(clientID)))
	body = append(body, clientID...)
	return append(append([]byte{0x10}, remainingLength(len(body))...), body...)
}

// publishQoS1 is a QoS 1 PUBLISH.
func publishQoS1(topic string, id uint16, payload []byte) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(topic)))
	body = append(body, topic...)
	body = binary.BigEndian.AppendUint16(body, id)
	body = append(body, payload...)
	return append(append([]byte{0x32}, remainingLength(len(body))...), body...)
}

// TestListener_ChurnLeavesNothingBehind connects and disconnects publishers
// thousands of times against the real listener: clean and persistent
// sessions, distinct and reused client IDs, QoS 1 messages settled or left
// in flight, DISCONNECT or an abrupt close (also before the CONNACK is
// read). Goroutines, heap, descriptors, the listener's ackers and claims,
// mochi's clients and the window must not grow with the number of rounds:
// persistent sessions under distinct IDs are bounded by MaxClients.
func TestListener_ChurnLeavesNothingBehind(t *testing.T) {
	const maxClients = 40
	sink := testsink.Func(func(ctx context.Context, m receivers.Message, done func()) {
		if string(m.Payload) == "settle" {
			done()
		}
	})
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}, MaxClients: maxClients}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, l, nil, nil)
	addr := b.l.Addr().String()
	payload := map[bool][]byte{true: []byte("settle"), false: make([]byte, 4096)}

	round := func(i int) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		id := fmt.Sprintf("churn-%d", i)
		if i%3 == 0 {
			id = fmt.Sprintf("churn-reused-%d", i%7)
		}
		clean := i%2 == 0
		if _, err := conn.Write(connectAs311(id, clean)); err != nil {
			t.Fatal(err)
		}
		if i%11 == 5 {
			return // abrupt, before reading the CONNACK
		}
		connack := make([]byte, 4)
		if _, err := io.ReadFull(conn, connack); err != nil {
			t.Fatalf("round %d: read CONNACK: %v", i, err)
		}
		settle := i%5 != 1
		if _, err := conn.Write(publishQoS1("factory/churn", 1, payload[settle])); err != nil {
			t.Fatal(err)
		}
		if settle {
			puback := make([]byte, 4)
			if _, err := io.ReadFull(conn, puback); err != nil || puback[0] != 0x40 {
				t.Fatalf("round %d: PUBACK %x: %v", i, puback, err)
			}
		}
		if i%4 == 0 {
			_, _ = conn.Write([]byte{0xe0, 0}) // DISCONNECT
		}
	}
	counts := func() map[string]int {
		l.mu.Lock()
		defer l.mu.Unlock()
		st := l.Stats()
		return map[string]int{"ackers": len(l.ackers), "claims": len(l.claims), "mochi_clients": l.srv.Clients.Len(),
			"inflight": st.InFlight, "inflight_bytes": int(st.InFlightBytes)}
	}
	n1, n2 := churnRounds(t)
	churn.Check(t, n1, n2, churn.Tolerance{Goroutines: 10, FDs: 5, HeapBytes: 1 << 20, Extra: 2}, counts, round) // mochi_clients: MaxClients plus the reused IDs
}
