package main

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// safe returns s fit for one line of the operator's terminal: control
// characters (C0, DEL, C1: "\x1b", "\n", "\u009b"), bidirectional
// controls and line separators are written as Go escapes, and so is every
// byte of invalid UTF-8 ("\xff"). A dead letter's topic, headers, payload
// and reason come from publishers and targets: their escape sequences must
// never reach the terminal (moving the cursor, hiding text, setting the
// window title, or worse on old terminals). JSON output (--format json) is
// left exact.
func safe(s string) string { return escape(s, false) }

// safeBlock is safe for a multi-line block (a payload): it keeps line feeds
// and tabs.
func safeBlock(s string) string { return escape(s, true) }

func escape(s string, block bool) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1: // a byte of invalid UTF-8
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case block && (r == '\n' || r == '\t'):
			b.WriteString(s[i : i+n])
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20, r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		// C1 controls; bidirectional controls, which reorder what the
		// operator reads; line separators; and U+FFFD, which would pass
		// for invalid UTF-8.
		case r >= 0x80 && r <= 0x9f,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == 0x2028, r == 0x2029, r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine shortens s to one line of at most n runes for tables, escaped
// (safe).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) > n {
		s = string([]rune(s)[:n-1]) + "…"
	}
	return safe(s)
}

// age formats now - t for tables ("-" when t is zero).
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	default:
		return d.Round(time.Minute).String()
	}
}
