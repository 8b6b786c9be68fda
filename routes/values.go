package routes

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"gopkg.in/yaml.v3"
)

// String returns d in Go's duration notation ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML parses a Go duration string with a unit ("250ms", "1s",
// "15m"), not negative; "0" alone is accepted as zero. The loader reports
// its errors, and bare numbers, with their position.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	switch {
	case err != nil:
		return fmt.Errorf("parse duration %q: %w", n.Value, err)
	case v < 0:
		return fmt.Errorf("duration %q: duration must not be negative", n.Value)
	}
	*d = Duration(v)
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
