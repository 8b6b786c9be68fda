package sqs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
)

// SQS limits checked before sending (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/quotas-messages.html).
const (
	// MaxMessageBytes is the largest message gobridge sends: the body plus
	// every attribute's name, data type and value. AWS raised its own quota
	// to 1 MiB in 2025; gobridge keeps the 256 KiB that every SQS-compatible
	// server and older queue accepts.
	MaxMessageBytes = 256 << 10
	// MaxBatchBytes is the most one SendMessageBatch carries, all entries
	// together; a larger batch is split.
	MaxBatchBytes = 256 << 10
	// MaxAttributes is the most message attributes per message, gobridge-id
	// included.
	MaxAttributes = routes.SQSMaxAttributes
	// MaxBatchSize is the most entries per SendMessageBatch.
	MaxBatchSize = 10
	// IDAttribute carries the envelope ID on every message.
	IDAttribute = routes.SQSIDAttribute
	// maxFIFOID is the longest MessageGroupId and MessageDeduplicationId.
	maxFIFOID = 128
	// stringType is the data type of every attribute gobridge sets.
	stringType = "String"
)

// MessageError is a message that SQS would refuse (too large, too many
// attributes, characters SQS does not accept, a template it cannot fill).
// Send returns it wrapped in senders.Permanent; the rest of the batch is
// sent.
type MessageError struct {
	ID     string // envelope ID
	Reason string
	Err    error // the template's *message.FieldError, when that is the cause
}

func (e *MessageError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("sqs: message %s: %s: %v", e.ID, e.Reason, e.Err)
	}
	return fmt.Sprintf("sqs: message %s: %s", e.ID, e.Reason)
}

func (e *MessageError) Unwrap() error { return e.Err }

// attribute is one configured attribute with its parsed value template.
type attribute struct {
	name  string
	value *message.Template
}

// entry is one envelope ready for a batch.
type entry struct {
	index int // in the envs of Send
	req   types.SendMessageBatchRequestEntry
	size  int // body + attributes, as SQS counts them
}

// build turns e into a batch entry, or returns a *MessageError.
func (s *Sender) build(index int, e *message.Envelope) (entry, error) {
	fail := func(err error, format string, args ...any) (entry, error) {
		return entry{}, &MessageError{ID: e.ID, Reason: fmt.Sprintf(format, args...), Err: err}
	}
	if len(e.Payload) == 0 {
		return fail(nil, "empty payload: SQS requires a body of at least one character")
	}
	if i := invalidChar(e.Payload); i >= 0 {
		return fail(nil, "payload byte %d is not a character SQS accepts (valid UTF-8 without control characters other than tab, CR, LF); transform binary payloads, e.g. to base64", i)
	}
	var p message.ParsedPayload
	attrs := make(map[string]types.MessageAttributeValue, len(e.Headers)+len(s.attrs)+1)
	size := len(e.Payload)
	set := func(name, value string) {
		if old, ok := attrs[name]; ok {
			size -= len(name) + len(stringType) + len(aws.ToString(old.StringValue))
		}
		attrs[name] = types.MessageAttributeValue{DataType: aws.String(stringType), StringValue: aws.String(value)}
		size += len(name) + len(stringType) + len(value)
	}
	for _, name := range slices.Sorted(maps.Keys(e.Headers)) {
		if reason := routes.SQSAttributeNameProblem(name); reason != "" {
			return fail(nil, "header %q cannot be an SQS attribute: %s", name, reason)
		}
		set(name, e.Headers[name])
	}
	for _, a := range s.attrs {
		v, err := a.value.Render(e, &p)
		if err != nil {
			return fail(err, "attribute %s", a.name)
		}
		set(a.name, v)
	}
	set(IDAttribute, e.ID)
	for name, v := range attrs {
		val := aws.ToString(v.StringValue)
		if val == "" {
			return fail(nil, "attribute %s is empty: SQS rejects empty attribute values", name)
		}
		if i := invalidChar([]byte(val)); i >= 0 {
			return fail(nil, "attribute %s: byte %d is not a character SQS accepts", name, i)
		}
	}
	if len(attrs) > MaxAttributes {
		return fail(nil, "%d message attributes (%s included), SQS allows at most %d", len(attrs), IDAttribute, MaxAttributes)
	}
	if size > MaxMessageBytes {
		return fail(nil, "message is %d bytes with its attributes, SQS allows at most %d", size, MaxMessageBytes)
	}
	req := types.SendMessageBatchRequestEntry{
		Id:                aws.String(fmt.Sprint(index)),
		MessageBody:       aws.String(string(e.Payload)),
		MessageAttributes: attrs,
	}
	if s.fifo {
		g, err := s.group.Render(e, &p)
		if err != nil {
			return fail(err, "message_group_id")
		}
		if !validFIFOID(g) {
			return fail(nil, "message_group_id %q must be 1..%d characters, ASCII letters, digits and punctuation", g, maxFIFOID)
		}
		req.MessageGroupId = aws.String(g)
		req.MessageDeduplicationId = aws.String(DeduplicationID(e.ID))
	}
	return entry{index: index, req: req, size: size}, nil
}

// DeduplicationID returns the FIFO MessageDeduplicationId for an envelope
// ID: the ID itself when SQS accepts it (1..128 ASCII letters, digits and
// punctuation, which every generated UUIDv7 is), otherwise the hex SHA-256
// of the ID (64 characters), so that an idempotency key taken from a payload
// still deduplicates.
func DeduplicationID(id string) string {
	if validFIFOID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])
}

func validFIFOID(s string) bool {
	if len(s) == 0 || len(s) > maxFIFOID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// invalidChar returns the byte offset of the first character SQS refuses in
// a body or string attribute (#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
// #x10000-#x10FFFF), or -1.
func invalidChar(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return i
		case r == 0x9 || r == 0xA || r == 0xD:
		case r < 0x20, r >= 0xD800 && r <= 0xDFFF, r == 0xFFFE, r == 0xFFFF:
			return i
		}
		i += n
	}
	return -1
}

// chunks splits entries, in order, into batches of at most size entries and
// MaxBatchBytes bytes, with at most one entry per FIFO message group: SQS
// may accept a group's later entry of a call while it refuses an earlier one.
func chunks(entries []entry, size int) [][]entry {
	var out [][]entry
	var cur []entry
	bytes := 0
	for _, e := range entries {
		g := e.req.MessageGroupId
		sameGroup := func(c entry) bool { return g != nil && *c.req.MessageGroupId == *g }
		if len(cur) > 0 && (len(cur) == size || bytes+e.size > MaxBatchBytes || slices.ContainsFunc(cur, sameGroup)) {
			out = append(out, cur)
			cur, bytes = nil, 0
		}
		cur = append(cur, e)
		bytes += e.size
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
