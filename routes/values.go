package routes

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrBareNumber is returned when a duration is written without a unit.
var ErrBareNumber = errors.New("duration needs a unit, e.g. \"1s\" or \"15m\"")

// ErrNegative is returned for a negative duration.
var ErrNegative = errors.New("duration must not be negative")

// ParseDuration parses a duration the way the config does: a Go duration
// string with a unit ("250ms", "1s", "15m"), not negative. "0" alone is
// accepted as zero.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("parse duration %q: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q: %w", s, ErrNegative)
	}
	return Duration(d), nil
}

// String returns d in Go's duration notation ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML accepts only strings with a unit; a bare number (an int or
// float node, such as `timeout: 5`) is an error, and so is a negative value.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a string such as \"1s\"", n.Line)
	}
	switch n.ShortTag() {
	case "!!int", "!!float":
		return fmt.Errorf("line %d: %q: %w", n.Line, n.Value, ErrBareNumber)
	case "!!null":
		*d = 0
		return nil
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes d as a duration string, so a marshalled config loads
// again.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// LogValue prints REDACTED (or nothing for an empty secret), so a Secret
// never reaches a log.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// GoString keeps %#v from printing the secret.
func (s Secret) GoString() string { return s.String() }

// MarshalJSON writes "REDACTED" (or "" for an empty secret), so a config
// printed as JSON never holds the secret.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// MarshalYAML writes REDACTED (or "" for an empty secret), likewise.
func (s Secret) MarshalYAML() (any, error) { return s.String(), nil }

// Reveal returns the secret's value, for the component that needs it.
func (s Secret) Reveal() string { return string(s) }
