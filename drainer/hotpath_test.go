package drainer

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestGroup_HotPathNeedsNoClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, nil)
		opts := testOptions(t, snd, testPolicy(), nil)
		opts.Poll = Poll{Min: time.Hour, Max: time.Hour}
		g, w, store := newGroup(t, opts)
		stop := running(t, g)
		waitCaughtUp(t, g)
		before := store.claims.Load()
		for i := range 200 {
			recs, _ := records(1, nil)
			recs[0].Envelope.ID = fmt.Sprintf("x%03d", i)
			w.append(recs...)
			synctest.Wait()
		}
		eventually(t, time.Minute, "delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := store.claims.Load() - before; n != 0 {
			t.Errorf("%d claims for 200 records appended while the drainer ran, want 0", n)
		}
		if snd.total() != 200 {
			t.Errorf("%d sends, want 200", snd.total())
		}
	})
}

// TestGroup_ClaimsWhatOtherInstancesAppend: another instance appends
// unclaimed records to a partition this one drains (it ingests from the
// same shared subscription) between the owner's own hot-path appends,
// whose Seqs are higher. The owner's next poll still finds them all.
func TestGroup_ClaimsWhatOtherInstancesAppend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		snd := newScriptSender(1, nil)
		g, w, store := newGroup(t, testOptions(t, snd, testPolicy(), nil))
		other := &writer{t: t, store: store} // no group: appends unclaimed
		stop := running(t, g)
		waitCaughtUp(t, g)
		for i := range 30 {
			recs, _ := records(1, nil)
			recs[0].Envelope.ID = fmt.Sprintf("other%03d", i)
			other.append(recs...)
			recs, _ = records(1, nil)
			recs[0].Envelope.ID = fmt.Sprintf("own%03d", i)
			w.append(recs...)
			synctest.Wait()
		}
		eventually(t, time.Minute, "every record delivered", func() bool { return live(t, store) == 0 })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if snd.total() != 60 {
			t.Errorf("%d sends, want 60", snd.total())
		}
	})
}

// waitCaughtUp waits until partition 0's first claim found the store
// empty: from then on, what the writer hands it goes through the hot path.
func waitCaughtUp(t *testing.T, g *Group) {
	t.Helper()
	eventually(t, time.Minute, "the first claim found the store empty", func() bool {
		p := g.part(0)
		if p == nil {
			return false
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		return !p.backlog
	})
}
