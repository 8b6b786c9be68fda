package bridge

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/sqlite"
)

// pickyStore refuses, as ErrInvalid, every write that holds a record whose
// payload contains "poison" (unless it is a truncated dead letter): as
// DynamoDB refuses an item over its size or key limits.
type pickyStore struct{ stores.Store }

func (p pickyStore) Write(ctx context.Context, b *stores.Batch) error {
	for _, r := range b.Append {
		if !r.Truncated && bytes.Contains(r.Envelope.Payload, []byte("poison")) {
			return fmt.Errorf("%w: item size has exceeded the maximum allowed size", stores.ErrInvalid)
		}
	}
	return p.Store.Write(ctx, b)
}

// A record the store refuses is isolated by bisecting its batch, kept as a
// truncated dead letter (DESIGN.md §11.1), and acknowledged; the other
// records of its batch, and another session, keep flowing.
func TestWriter_IsolatesARecordTheStoreRefuses(t *testing.T) {
	t.Parallel()
	s := newSink(t)
	addr := freeAddr(t)
	cfg := parseConfig(t, listenerConfig(addr, "", "{type: memory}",
		fmt.Sprintf(`  - {id: sink, type: http, options: {url: %q}}`, s.srv.URL), `
  - {id: a, receiver: edge, topic: "a/#", sender: sink, delivery_mode: shared_outbox, session: {id: sa}}
  - {id: b, receiver: edge, topic: "b/#", sender: sink, delivery_mode: shared_outbox, session: {id: sb}}`))
	rt, err := New(cfg, Options{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	rt.writer.store = pickyStore{rt.store}
	startRun(t, rt)
	pub := publisher(t, "tcp://"+addr, "picky")
	var toks []paho.Token
	for i := range 200 {
		topic, body := fmt.Sprintf("a/%d", i%3), msgID(i)
		if i%2 == 1 {
			topic = "b/1"
		}
		if i == 77 {
			body = "poison " + strings.Repeat("x", 5000)
		}
		toks = append(toks, pub.Publish(topic, 1, false, body))
	}
	waitTokens(t, toks, 20*time.Second) // every message acknowledged, the refused one too
	waitFor(t, 10*time.Second, "the other 199 delivered", func() bool { return s.distinct() == 199 })
	dead, _, err := rt.store.Dead(t.Context(), stores.DeadQuery{})
	if err != nil || len(dead) != 1 {
		t.Fatalf("dead letters: %d, %v; want the refused record", len(dead), err)
	}
	d := dead[0]
	if !d.Truncated || len(d.Envelope.Payload) != stores.TruncatedPayload || !strings.Contains(d.DeadReason, "store refused the record") ||
		!strings.Contains(d.DeadReason, "sha256") {
		t.Errorf("dead letter: truncated %v, %d bytes, reason %q", d.Truncated, len(d.Envelope.Payload), d.DeadReason)
	}
}

// Flush returns only once what was queued before it is durable, also when
// the write that carries it has already taken it from the queue: a drainer
// flushes its settlements before it releases its partition's lease, and the
// next owner must not find them missing.
func TestWriter_FlushWaitsForTheWriteUnderWay(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "outbox.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	limits := newAdmission(st.Stats)
	w := newWriter(st, m, testLogger(t), limits)
	w.setGroups(nil)
	running := make(chan struct{})
	go func() { defer close(running); w.run() }()
	t.Cleanup(func() { w.stop(); <-running })

	limits.io.Lock() // the write takes its batch, then waits here
	var unlock sync.Once
	release := func() { unlock.Do(limits.io.Unlock) }
	defer release()
	w.add(stores.Record{Session: "s", Route: "r", Envelope: message.Envelope{ID: message.NewID(), Topic: "a/1", Payload: []byte("p")}}, func(*stores.Record, error) {})
	waitFor(t, 10*time.Second, "the write to take the record", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.appends) == 0
	})
	flushed, watching := make(chan struct{}), make(chan struct{})
	go func() { // the write goes on once Flush waits for it, not before
		defer close(watching)
		for {
			w.mu.Lock()
			waiting := len(w.waiters) > 0
			w.mu.Unlock()
			if waiting {
				release()
				return
			}
			select {
			case <-flushed:
				return
			case <-time.After(5 * time.Millisecond): // polling interval
			}
		}
	}()
	err = w.Flush(t.Context())
	close(flushed)
	<-watching
	if err != nil {
		t.Fatal(err)
	}
	stats, err := st.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(stats) != 1 || stats[0].Live != 1 {
		t.Fatalf("after Flush the store holds %+v; want the record queued before it", stats)
	}
}
