package listener

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/gobridge/gobridge/receivers"
	"github.com/gobridge/gobridge/receivers/internal/testsink"
)

// TestListener_StopsWhileClientsComeAndGo stops the listener while clients
// keep connecting and dropping their connections. mochi v2.7.9's own
// listener-close path read-locks its client map twice, so a client detaching
// in between deadlocked shutdown forever (seen in CI); Run must return.
func TestListener_StopsWhileClientsComeAndGo(t *testing.T) {
	t.Parallel()
	const rounds, churners = 25, 6
	for round := range rounds {
		b := setup(t, testsink.New(true), nil)
		addr := b.url[len("tcp://"):]
		var (
			quit      = make(chan struct{})
			wg        sync.WaitGroup
			connected atomic.Int64
		)
		for c := range churners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-quit:
						return
					default:
					}
					if connectAndDrop(addr, fmt.Sprintf("churn-%d-%d-%d", round, c, i)) {
						connected.Add(1)
					}
				}
			}()
		}
		testsink.Eventually(t, "clients connecting and dropping", func() bool { return connected.Load() >= churners*3 })
		stopped := make(chan struct{})
		go func() { b.stop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(time.Minute): // a deadlock detector, not a speed bound
			// Cleanup would wait on the same stop, so fail loudly right here.
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			panic(fmt.Sprintf("round %d: the listener did not stop within a minute while clients churned\n%s", round, buf))
		}
		close(quit)
		wg.Wait()
	}
}

// connectAndDrop opens a connection, sends an MQTT 3.1.1 CONNECT with a clean
// session, waits for the CONNACK and drops the connection without a
// DISCONNECT. It reports whether the broker accepted the connection.
func connectAndDrop(addr, clientID string) bool {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	variable := []byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60}
	payload := binary.BigEndian.AppendUint16(nil, uint16(len(clientID)))
	payload = append(payload, clientID...)
	pkt := append([]byte{0x10, byte(len(variable) + len(payload))}, variable...)
	pkt = append(pkt, payload...)
	if _, err := conn.Write(pkt); err != nil {
		return false
	}
	var connack [4]byte
	if _, err := io.ReadFull(conn, connack[:]); err != nil {
		return false
	}
	return connack[0] == 0x20 && connack[3] == 0
}

// TestListener_TakenOverConnectionLetsGoOfItsMessage: a message whose
// route pushes back (a full outbox) holds its publisher's read loop. When
// the publisher reconnects (mochi closes the old connection: a takeover),
// the old message's Accept must end, so that its goroutine, its connection
// slot and its window room are given back, instead of waiting for the
// route as long as the listener runs.
func TestListener_TakenOverConnectionLetsGoOfItsMessage(t *testing.T) {
	t.Parallel()
	held, let := make(chan struct{}), make(chan error, 1)
	settled := make(chan string, 10)
	sink := testsink.Func(func(ctx context.Context, m receivers.Message, done func()) {
		if string(m.Payload) == "held" {
			close(held)
			<-ctx.Done() // pushes back until its ctx ends
			let <- ctx.Err()
			return
		}
		done()
		settled <- string(m.Payload)
	})
	l, err := New(Options{ID: "edge", Listen: "127.0.0.1:0", Topics: []string{"factory/#"}}, sink, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b := start(t, l, nil, nil)
	clientID := "takeover-" + t.Name()
	same := func(o *paho.ClientOptions) { o.SetClientID(clientID) }
	first := publisher(t, b.url, same)
	first.Publish("factory/1", 1, false, "held")
	<-held
	second := publisher(t, b.url, same) // takes the session over: mochi closes the first connection
	waitToken(t, second.Publish("factory/1", 1, false, "next"))
	if got := <-settled; got != "next" {
		t.Fatalf("settled %q", got)
	}
	select {
	case <-let:
	case <-time.After(10 * time.Second):
		t.Fatal("the taken-over connection's message still waits for its route")
	}
	testsink.Eventually(t, "its room given back", func() bool {
		s := l.Stats()
		return s.InFlight == 0 && s.InFlightBytes == 0 && s.Abandoned == 1
	})
}
