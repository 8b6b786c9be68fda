package processors

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/gobridge/gobridge/message"
)

type headerTemplate struct {
	name string
	tmpl *message.Template
}

// compileSetHeaders compiles header name -> template. Headers are rendered
// against the message as it was before this processor, then all set, in
// name order.
func compileSetHeaders(i int, headers map[string]string) (step, CompileErrors) {
	if len(headers) == 0 {
		return nil, CompileErrors{{Index: i, Field: "headers", Offset: -1, Err: errors.New("set_headers needs at least one header")}}
	}
	names := slices.Sorted(maps.Keys(headers))
	var errs CompileErrors
	hs := make([]headerTemplate, 0, len(names))
	for _, name := range names {
		if name == "" {
			errs = append(errs, &CompileError{Index: i, Field: "headers", Offset: -1, Err: errors.New("header name must not be empty")})
			continue
		}
		t, err := compileTemplate(i, "headers."+name, headers[name])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hs = append(hs, headerTemplate{name: name, tmpl: t})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return func(s *state) error {
		values := make([]string, len(hs))
		for j, h := range hs {
			v, err := h.tmpl.Render(s.e, &s.payload)
			if err != nil {
				return fmt.Errorf("header %q: %w", h.name, err)
			}
			values[j] = v
		}
		// A copy: the original map may be shared, and a failed Process
		// restores it.
		own := make(map[string]string, len(s.e.Headers)+len(hs))
		maps.Copy(own, s.e.Headers)
		for j, h := range hs {
			own[h.name] = values[j]
		}
		s.e.Headers = own
		return nil
	}, nil
}

// compileIdempotencyKey compiles the envelope ID rule: exactly one of a
// `from` template or `hash: true` (hex SHA-256 of topic, a zero byte, and
// the payload).
func compileIdempotencyKey(i int, from string, hash bool) (step, *CompileError) {
	switch {
	case from != "" && hash:
		return nil, &CompileError{Index: i, Field: "hash", Offset: -1, Err: errors.New("set either from or hash: true, not both")}
	case from == "" && !hash:
		return nil, &CompileError{Index: i, Field: "from", Offset: -1, Err: errors.New("idempotency_key needs from (a template) or hash: true")}
	case hash:
		return hashID, nil
	}
	t, err := compileTemplate(i, "from", from)
	if err != nil {
		return nil, err
	}
	return func(s *state) error {
		id, err := t.Render(s.e, &s.payload)
		if err != nil {
			return err
		}
		if id == "" {
			return fmt.Errorf("from %q rendered an empty ID", t.String())
		}
		s.e.ID = id
		return nil
	}, nil
}

// hashID sets the envelope ID to the hex SHA-256 of topic, 0x00, payload.
func hashID(s *state) error {
	h := sha256.New()
	_, _ = io.WriteString(h, s.e.Topic)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(s.e.Payload)
	s.e.ID = hex.EncodeToString(h.Sum(nil))
	return nil
}

func compileCoalesce(i int, key string) (step, *CompileError) {
	if key == "" {
		return nil, &CompileError{Index: i, Field: "key", Offset: -1, Err: errors.New("coalesce needs key (a template)")}
	}
	t, err := compileTemplate(i, "key", key)
	if err != nil {
		return nil, err
	}
	return func(s *state) error {
		k, err := t.Render(s.e, &s.payload)
		if err != nil {
			return err
		}
		if k == "" {
			return fmt.Errorf("key %q rendered an empty key", t.String())
		}
		s.res.CoalesceKey = k
		return nil
	}, nil
}
