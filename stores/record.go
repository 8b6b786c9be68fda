package stores

import (
	"fmt"
	"strconv"
	"strings"
)

// Validate reports a record that no store can hold, as ErrInvalid with the
// reason. Backends call it on every record of an Append.
func (r *Record) Validate() error {
	switch {
	case r.Session == "":
		return fmt.Errorf("%w: empty session", ErrInvalid)
	case r.Route == "":
		return fmt.Errorf("%w: empty route", ErrInvalid)
	case r.Envelope.ID == "":
		return fmt.Errorf("%w: empty envelope ID", ErrInvalid)
	case r.Partition < 0:
		return fmt.Errorf("%w: negative partition", ErrInvalid)
	}
	return nil
}

// Validate reports a claim request no store can serve, as ErrInvalid.
func (req *ClaimRequest) Validate() error {
	if req.Session == "" || req.Partition < 0 || req.Limit < 1 {
		return fmt.Errorf("%w: claim of session %q, partition %d, limit %d",
			ErrInvalid, req.Session, req.Partition, req.Limit)
	}
	return nil
}

// ValidateDead reports a record that AppendDead cannot hold: one that fails
// Validate, or has no DeadReason.
func (r *Record) ValidateDead() error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.DeadReason == "" {
		return fmt.Errorf("%w: empty dead reason of %s", ErrInvalid, r.Envelope.ID)
	}
	return nil
}

// DeadCursor is the position of dead letter r in list order (DeadAt, then
// Seq), as DeadFilter.After takes it.
func DeadCursor(r *Record) string {
	var at int64
	if !r.DeadAt.IsZero() {
		at = r.DeadAt.UnixNano()
	}
	return strconv.FormatInt(at, 10) + "." + strconv.FormatInt(r.Seq, 10)
}

// ParseDeadCursor reads a DeadCursor back: DeadAt in Unix nanoseconds and
// Seq. A malformed cursor is ErrInvalid.
func ParseDeadCursor(c string) (deadAt, seq int64, err error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		deadAt, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			seq, err = strconv.ParseInt(b, 10, 64)
		}
	}
	if !ok || err != nil {
		return 0, 0, fmt.Errorf("%w: bad cursor %q", ErrInvalid, c)
	}
	return deadAt, seq, nil
}
