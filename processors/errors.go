package processors

import (
	"fmt"
	"strconv"
)

// CompileError reports a processor (or the route's ordering_key) that does
// not compile. Index is the position in the route's processors list, or -1
// for the route-level ordering_key. Field is the offending YAML key within
// that processor ("expr", "from", "hash", "key", "type", "headers",
// "headers.NAME"; "ordering_key" when Index is -1). Offset is the byte offset
// of the problem within the field's value, or -1 when unknown. Err is the
// cause: a *message.TemplateError for templates, an expression error, or a
// plain validation error.
type CompileError struct {
	Index  int
	Field  string
	Offset int
	Err    error
}

// Path returns the YAML path of the field relative to the route, e.g.
// "processors[1].expr" or "ordering_key", so that a caller can report it as
// routes[i].<Path>.
func (e *CompileError) Path() string {
	if e.Index < 0 {
		return e.Field
	}
	p := "processors[" + strconv.Itoa(e.Index) + "]"
	if e.Field != "" {
		p += "." + e.Field
	}
	return p
}

func (e *CompileError) Error() string {
	if e.Offset >= 0 {
		return fmt.Sprintf("%s (offset %d): %v", e.Path(), e.Offset, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.Path(), e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// ProcessError reports a processor that failed on one message: an expression
// runtime error, a filter that did not return a bool, a transform result that
// does not encode as JSON, or a template placeholder the message cannot fill
// (a *message.FieldError). Chain.Process returns it wrapped in a
// *senders.PermanentError. Index is -1 for the route's ordering_key.
type ProcessError struct {
	Index int
	Type  string
	Err   error
}

func (e *ProcessError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("ordering_key: %v", e.Err)
	}
	return fmt.Sprintf("processors[%d] (%s): %v", e.Index, e.Type, e.Err)
}

func (e *ProcessError) Unwrap() error { return e.Err }
