package routes_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/routes"
)

// zeroDoc is a valid config whose policy fields are filled in by the test.
const zeroDoc = `version: 1
bridge: {id: test}
stores:
  outbox: {type: sqlite, options: {done_retention: %s}}
receivers:
  - {id: edge, type: mqtt_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: out, type: stdout}
routes:
  - id: all
    receiver: edge
    topic: "#"
    sender: out
    delivery_mode: shared_outbox
    session: {id: edge}
    policy: {max_replay_attempts: %s, replay_budget: %s, ttl: %s, max_in_flight: %s}
`

func TestParse_MeaningfulZerosAreKept(t *testing.T) {
	cfg, probs := load(t, fmt.Sprintf(zeroDoc, "0", "0", "0s", "0s", "~"), nil)
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	p := cfg.Routes[0].Policy
	if p.MaxReplayAttempts != 0 || p.ReplayBudget != 0 || p.TTL != 0 {
		t.Errorf("written zeros replaced: max_replay_attempts %d, replay_budget %s, ttl %s", p.MaxReplayAttempts, p.ReplayBudget, p.TTL)
	}
	if n := cfg.Stores.Outbox.Options.DoneRetention; n != 0 {
		t.Errorf("done_retention: 0 became %d", n)
	}
	if p.MaxInFlight != 100 {
		t.Errorf("max_in_flight: ~ (null) = %d, want the default 100", p.MaxInFlight)
	}
}

func TestParse_LeftOutTakesDefaults(t *testing.T) {
	cfg, probs := load(t, fmt.Sprintf(zeroDoc, "~", "~", "~", "~", "~"), nil)
	if len(probs) > 0 {
		t.Fatalf("problems: %v", probs)
	}
	p := cfg.Routes[0].Policy
	if p.MaxReplayAttempts != 5 || p.ReplayBudget.D() != 15*time.Minute || p.TTL != 0 {
		t.Errorf("defaults not applied: %+v", p)
	}
	if n := cfg.Stores.Outbox.Options.DoneRetention; n != 100_000 {
		t.Errorf("done_retention = %d, want 100000", n)
	}
}

func TestParse_MeaninglessZeroIsAnError(t *testing.T) {
	for _, v := range []string{"0", "0x0", "-0", `"${N:-0}"`} {
		_, probs := load(t, fmt.Sprintf(zeroDoc, "~", "~", "~", "~", v), nil)
		if len(probs) != 1 || probs[0].Rule != "zero-value" || probs[0].Line != 16 {
			t.Errorf("max_in_flight: %s: problems %v, want one zero-value error on line 16", v, probs)
		}
	}
}

// TestZeroFields_ClassifiesEveryNumber makes every number and duration field
// say what an explicit 0 means (its zero tag, read by ZeroFields), so that a new field
// cannot quietly turn a written 0 into its default.
func TestZeroFields_ClassifiesEveryNumber(t *testing.T) {
	numbers := map[string]bool{}
	numberLeaves(reflect.TypeFor[routes.Config](), "", numbers)
	table := routes.ZeroFields()
	for p := range numbers {
		if _, ok := table[p]; !ok {
			t.Errorf("%s is a number or duration missing from zeroFields: decide what an explicit 0 means there", p)
		}
	}
	for p := range table {
		if !numbers[p] {
			t.Errorf("zeroFields lists %s, which is not a number or duration field", p)
		}
	}
	if len(numbers) < 20 {
		t.Fatalf("found only %d number fields; is the walk broken?", len(numbers))
	}
}

var durationType = reflect.TypeFor[routes.Duration]()

func numberLeaves(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == durationType, t.Kind() == reflect.Int, t.Kind() == reflect.Int64, t.Kind() == reflect.Float64:
		out[prefix] = true
	case t.Kind() == reflect.Slice:
		numberLeaves(t.Elem(), prefix+"[]", out)
	case t.Kind() == reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			numberLeaves(f.Type, p, out)
		}
	}
}
