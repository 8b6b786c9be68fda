package processors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"
)

// envVars are the expression variables. A message computes only those its
// expressions read: raw copies the payload, topic_segments splits the
// topic, payload decodes it (at most once per payload slice).
var envVars = map[string]func(s *state) any{
	"topic":          func(s *state) any { return s.e.Topic },
	"topic_segments": func(s *state) any { return strings.Split(s.e.Topic, "/") },
	"headers":        func(s *state) any { return s.e.Headers },
	"payload":        func(s *state) any { v, _ := s.payload.Value(s.e.Payload); return v }, // nil when not JSON
	"raw":            func(s *state) any { return string(s.e.Payload) },
	"qos":            func(s *state) any { return int(s.e.QoS) },
}

// envTypes is the environment expressions are checked against: unknown
// variables are compile errors, and payload may be anything JSON decodes to.
var envTypes = types.Map{
	"topic":          types.String,
	"topic_segments": types.TypeOf([]string{}),
	"headers":        types.TypeOf(map[string]string{}),
	"payload":        types.Any,
	"raw":            types.String,
	"qos":            types.Int,
}

// program is a compiled expression and the environment variables it reads.
type program struct {
	src  string
	prog *vm.Program
	uses []string // the envVars it reads
}

// compileExpr compiles src for processor i. It never panics: expr's checker
// is guarded, and a panic there becomes a compile error.
func compileExpr(i int, src string, asBool bool) (p *program, cerr *CompileError) {
	if strings.TrimSpace(src) == "" {
		return nil, &CompileError{Index: i, Field: "expr", Offset: -1, Err: errors.New("expr is required")}
	}
	defer func() {
		if r := recover(); r != nil {
			p, cerr = nil, &CompileError{Index: i, Field: "expr", Offset: -1, Err: fmt.Errorf("expression does not compile: %v", r)}
		}
	}()
	opts := []expr.Option{expr.Env(envTypes)}
	if asBool {
		opts = append(opts, expr.AsBool())
	}
	prog, err := expr.Compile(src, opts...)
	if err != nil {
		off := -1
		if fe, ok := errors.AsType[*file.Error](err); ok {
			off = runeToByteOffset(src, fe.From)
			err = fmt.Errorf("%s (line %d, column %d)", fe.Message, fe.Line, fe.Column+1)
		}
		return nil, &CompileError{Index: i, Field: "expr", Offset: off, Err: err}
	}
	return &program{src: src, prog: prog, uses: usedVars(prog)}, nil
}

func runeToByteOffset(s string, runes int) int {
	if runes < 0 {
		return -1
	}
	off := 0
	for n := 0; n < runes && off < len(s); n++ {
		_, size := utf8.DecodeRuneInString(s[off:])
		off += size
	}
	return off
}

type identVisitor struct{ uses []string }

func (v *identVisitor) Visit(n *ast.Node) {
	if id, ok := (*n).(*ast.IdentifierNode); ok && envVars[id.Value] != nil && !slices.Contains(v.uses, id.Value) {
		v.uses = append(v.uses, id.Value)
	}
}

func usedVars(prog *vm.Program) []string {
	v := &identVisitor{}
	node := prog.Node()
	ast.Walk(&node, v)
	return v.uses
}

// segmentProblems reports each topic_segments[N] in expression src
// (processor i) that is out of range for every topic of a route whose
// topics have levels levels (-1: not fixed), unless the expression reads
// len(topic_segments) to guard it: it would fail every message.
func segmentProblems(i int, src string, levels int) CompileErrors {
	prog, err := expr.Compile(src, expr.Env(envTypes))
	if levels < 0 || err != nil {
		return nil
	}
	v := &segmentVisitor{}
	node := prog.Node()
	ast.Walk(&node, v)
	var errs CompileErrors
	for _, m := range v.index {
		n := m.Property.(*ast.IntegerNode).Value
		if !v.guarded && (n >= levels || n < -levels) {
			errs = append(errs, &CompileError{Index: i, Field: "expr", Offset: runeToByteOffset(src, m.Location().From),
				Err: fmt.Errorf("topic_segments[%d] is out of range for every topic of this route, which have %d levels: every message would fail (column %d)", n, levels, m.Location().From+1)})
		}
	}
	return errs
}

// segmentVisitor finds topic_segments[N] with a constant N, and whether
// len(topic_segments) is read.
type segmentVisitor struct {
	index   []*ast.MemberNode
	guarded bool
}

func (v *segmentVisitor) Visit(node *ast.Node) {
	segments := func(n ast.Node) bool {
		id, ok := n.(*ast.IdentifierNode)
		return ok && id.Value == "topic_segments"
	}
	switch n := (*node).(type) {
	case *ast.MemberNode:
		if _, ok := n.Property.(*ast.IntegerNode); ok && segments(n.Node) {
			v.index = append(v.index, n)
		}
	case *ast.BuiltinNode:
		v.guarded = v.guarded || n.Name == "len" && len(n.Arguments) == 1 && segments(n.Arguments[0])
	}
}

func (s *state) run(p *program) (any, error) {
	for _, name := range p.uses {
		s.env[name] = envVars[name](s)
	}
	out, err := s.vm.Run(p.prog, s.env)
	if err != nil {
		if fe, ok := errors.AsType[*file.Error](err); ok {
			return nil, fmt.Errorf("evaluate %q: %s (column %d)", p.src, fe.Message, fe.Column+1)
		}
		return nil, fmt.Errorf("evaluate %q: %w", p.src, err)
	}
	return out, nil
}

func compileFilter(i int, src string) (step, *CompileError) {
	p, err := compileExpr(i, src, true)
	if err != nil {
		return nil, err
	}
	return func(s *state) error {
		out, err := s.run(p)
		if err != nil {
			return err
		}
		keep, ok := out.(bool)
		if !ok {
			return fmt.Errorf("filter %q returned %T, want bool", src, out)
		}
		if !keep {
			s.res.Drop = true
		}
		return nil
	}, nil
}

func compileTransform(i int, src string, maxBytes int) (step, *CompileError) {
	p, err := compileExpr(i, src, false)
	if err != nil {
		return nil, err
	}
	return func(s *state) error {
		out, err := s.run(p)
		if err != nil {
			return err
		}
		payload, err := encodePayload(out)
		if err != nil {
			return fmt.Errorf("transform %q: %w", src, err)
		}
		if maxBytes > 0 && len(payload) > maxBytes {
			return fmt.Errorf("transform %q made %d bytes, over the receiver's max_payload_bytes (%d)", src, len(payload), maxBytes)
		}
		s.e.Payload = payload // a new slice: cached decodings notice it
		return nil
	}, nil
}

// encodePayload turns a transform result into a payload: strings and byte
// slices as they are, anything else as compact JSON.
func encodePayload(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return []byte(x), nil
	case []byte:
		return bytes.Clone(x), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("result %T does not encode as JSON: %w", v, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
