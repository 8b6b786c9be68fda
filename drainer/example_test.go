package drainer_test

import (
	"context"
	"fmt"

	"github.com/gobridge/gobridge/drainer"
	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/stores"
	"github.com/gobridge/gobridge/stores/memory"
)

// printSender prints what it is given and signals each send on done.
type printSender struct{ done chan struct{} }

func (printSender) BatchSize() int { return 1 }

func (s printSender) Send(_ context.Context, envs []*message.Envelope) []error {
	for _, e := range envs {
		fmt.Printf("sent %s %s\n", e.ID, e.Payload)
	}
	s.done <- struct{}{}
	return make([]error, len(envs))
}

func ExampleNew() {
	store := memory.New()
	defer store.Close()
	snd := printSender{done: make(chan struct{}, 1)}
	g := drainer.New(drainer.Config{
		Session: "plant",
		Owner:   "line-7",
		Routes: map[string]drainer.Route{
			"telemetry": {Sender: snd, Policy: routes.Policy{MaxInFlight: 10, MaxReplayAttempts: 5,
				ReplayBudget: routes.Duration(15 * 60e9)}},
		},
	}, store, memory.NewLeases())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- g.Run(ctx) }()

	// Ingest appends, then wakes the partition so delivery does not wait
	// for the next poll.
	rec := stores.Record{Session: "plant", Route: "telemetry",
		Envelope: message.Envelope{ID: "msg-1", Topic: "factory/line-7/telemetry", Payload: []byte(`{"temp":21}`)}}
	if err := store.Append(ctx, rec); err != nil {
		fmt.Println(err)
	}
	g.Wake(0)
	<-snd.done

	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// sent msg-1 {"temp":21}
	// run: <nil>
}
