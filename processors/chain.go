// Package processors compiles a route's processor chain (filter, transform,
// set_headers, idempotency_key, coalesce) from its configuration and runs it
// on each message.
//
// Expressions (filter, transform) use expr-lang/expr and templates use
// message.Template; both compile once, in Compile, which `gobridge check`
// calls (routes checks the options each type takes). Per message,
// Chain.Process runs the steps in order, decoding the JSON payload at most
// once (again only after a transform replaced it); it never panics on data.
package processors

import (
	"errors"
	"fmt"
	"sync"

	"github.com/expr-lang/expr/vm"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// Processor types, as written in the configuration.
const (
	TypeFilter         = "filter"
	TypeTransform      = "transform"
	TypeSetHeaders     = "set_headers"
	TypeIdempotencyKey = "idempotency_key"
	TypeCoalesce       = "coalesce"
)

// Result is what a chain decided about one message.
type Result struct {
	// Drop is true when a filter rejected the message: it is settled
	// (acknowledged) and counted as filtered, not delivered.
	Drop bool
	// CoalesceKey is the key of the last coalesce processor, or "" when the
	// route does not coalesce. The outbox replaces an older pending,
	// unclaimed record of the same route and key with this message.
	CoalesceKey string
}

// step is one compiled processor; it sets s.res.Drop to stop the chain.
type step func(s *state) error

// Chain is a route's compiled processor chain. It is immutable after
// Compile and safe for concurrent use by many goroutines.
type Chain struct {
	steps       []step
	types       []string
	orderingKey *message.Template
	pool        sync.Pool // of *state
}

// CompileErrors is the error Compile returns: every problem found, in
// order. errors.As finds the first *CompileError.
type CompileErrors []*CompileError

func (es CompileErrors) Error() string {
	if len(es) == 1 {
		return es[0].Error()
	}
	msg := fmt.Sprintf("%d processor problems:", len(es))
	for _, e := range es {
		msg += "\n\t" + e.Error()
	}
	return msg
}

// Unwrap returns the individual *CompileError values.
func (es CompileErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Compile compiles route.Processors, in order, and route.OrderingKey.
// maxPayloadBytes (the route's receiver's max_payload_bytes; <= 0: no
// limit) bounds what a transform may make: a larger result fails the
// message, as its receiver would have refused it (DESIGN.md §11.1). It
// reports every problem it finds (an unknown type, a missing or superfluous
// field, an expression or template that does not compile) as CompileErrors.
// A route without processors or ordering key compiles to a chain whose
// Process does nothing.
func Compile(route routes.RouteConfig, maxPayloadBytes int) (*Chain, error) {
	c := &Chain{}
	var errs CompileErrors
	_, levels := routes.TopicLevels(route.Topic)
	for i, pc := range route.Processors {
		st, perr := compileProcessor(i, pc, maxPayloadBytes)
		if len(perr) == 0 && (pc.Type == TypeFilter || pc.Type == TypeTransform) {
			perr = segmentProblems(i, pc.Expr, levels)
		}
		if len(perr) > 0 {
			errs = append(errs, perr...)
			continue
		}
		c.steps = append(c.steps, st)
		c.types = append(c.types, pc.Type)
	}
	if route.OrderingKey != "" {
		t, err := compileTemplate(-1, "ordering_key", route.OrderingKey)
		if err != nil {
			errs = append(errs, err)
		}
		c.orderingKey = t
	}
	if len(errs) > 0 {
		return nil, errs
	}
	c.pool.New = func() any { return &state{env: make(map[string]any, len(envVars))} }
	return c, nil
}

// Process runs the chain on e, changing e in place: a transform replaces
// e.Payload (with a new slice), set_headers adds to e.Headers, and
// idempotency_key replaces e.ID; finally e.Key is set from the route's
// ordering_key, when it has one. A caller that shares e between routes must
// Clone it first.
//
// Process stops at the first filter that rejects the message and returns
// Result{Drop: true}. When a processor fails on the message it returns a
// *senders.PermanentError wrapping a *ProcessError (whose cause may be a
// *message.FieldError), and leaves e as it was before Process, so that
// the message is dead-lettered as it arrived.
func (c *Chain) Process(e *message.Envelope) (Result, error) {
	if len(c.steps) == 0 && c.orderingKey == nil {
		return Result{}, nil
	}
	s := c.pool.Get().(*state)
	s.e = e
	defer func() {
		s.e, s.res = nil, Result{}
		s.payload.Reset()
		clear(s.env)
		c.pool.Put(s)
	}()
	// Payload slices are never written into and set_headers copies the
	// headers map, so restoring the fields restores the message.
	orig := *e
	for i, st := range c.steps {
		if err := st(s); err != nil {
			*e = orig
			return Result{}, senders.Permanent(&ProcessError{Index: i, Type: c.types[i], Err: err})
		}
		if s.res.Drop {
			return Result{Drop: true}, nil
		}
	}
	if c.orderingKey != nil {
		key, err := c.orderingKey.Render(e, &s.payload)
		if err == nil && key == "" { // "" would mean unordered
			err = fmt.Errorf("%q rendered an empty key", c.orderingKey.String())
		}
		if err != nil {
			*e = orig
			return Result{}, senders.Permanent(&ProcessError{Index: -1, Err: err})
		}
		e.Key = key
	}
	return s.res, nil
}

// state is the per-message working set of a chain, pooled so that a message
// costs no allocations beyond those of its own data.
type state struct {
	e       *message.Envelope
	payload message.ParsedPayload // decoded at most once per payload slice
	res     Result
	vm      vm.VM
	env     map[string]any
}

func compileProcessor(i int, pc routes.ProcessorConfig, maxPayloadBytes int) (step, CompileErrors) {
	var st step
	var err *CompileError
	switch pc.Type {
	case TypeFilter:
		st, err = compileFilter(i, pc.Expr)
	case TypeTransform:
		st, err = compileTransform(i, pc.Expr, maxPayloadBytes)
	case TypeSetHeaders:
		return compileSetHeaders(i, pc.Headers)
	case TypeIdempotencyKey:
		st, err = compileIdempotencyKey(i, pc.From, pc.Hash)
	case TypeCoalesce:
		st, err = compileCoalesce(i, pc.Key)
	default:
		err = &CompileError{Index: i, Field: "type", Offset: -1,
			Err: fmt.Errorf("unknown processor type %q (want filter, transform, set_headers, idempotency_key or coalesce)", pc.Type)}
	}
	if err != nil {
		return nil, CompileErrors{err}
	}
	return st, nil
}

// compileTemplate parses a template field; "" is a literal empty value.
func compileTemplate(i int, field, src string) (*message.Template, *CompileError) {
	t, err := message.ParseTemplate(src)
	if err != nil {
		off := -1
		if te, ok := errors.AsType[*message.TemplateError](err); ok {
			off = te.Offset
		}
		return nil, &CompileError{Index: i, Field: field, Offset: off, Err: err}
	}
	return t, nil
}
