package routes

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"gopkg.in/yaml.v3"
)

// ParseDuration parses a duration the way the config does: a Go duration
// string with a unit ("250ms", "1s", "15m"), not negative. "0" alone is
// accepted as zero.
func ParseDuration(s string) (Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("parse duration %q: %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q: duration must not be negative", s)
	}
	return Duration(d), nil
}

// String returns d in Go's duration notation ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a duration string with a unit (ParseDuration). The
// loader has already reported bare numbers and negative values, with their
// position.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	*d = v
	return err
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
