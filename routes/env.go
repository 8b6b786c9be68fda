package routes

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// templateLiteral escapes text for a template field: "{" and "}" become
// "{{" and "}}", so the text renders as itself, never as a placeholder.
var templateLiteral = strings.NewReplacer("{", "{{", "}", "}}")

// expandEnv replaces ${VAR} and ${VAR:-default} in s using lookup. ${VAR:-d}
// uses d when VAR is unset or empty; ${VAR} with VAR unset is an error.
// "$${" writes a literal "${". Other "$" characters are kept as they are
// (so "$share/..." topics need no escaping). A template field passes
// template true: each expanded value is escaped (templateLiteral), so that
// it is literal text. It reports whether s contained any expansion. Its
// errors never quote s whole; a syntax error may quote the text between
// "${" and "}", unless s is a secret.
func expandEnv(s string, lookup func(string) (string, bool), template, secret bool) (string, bool, error) {
	if !strings.Contains(s, "${") {
		return s, false, nil
	}
	malformed := func(msg string) error {
		if secret {
			msg = "malformed ${...}: use ${NAME} or ${NAME:-default}, or $${ for a literal ${" // never echo a secret
		}
		return errors.New(msg)
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte(s[i])
			i++
			continue
		}
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", true, malformed("unterminated ${ (write ${NAME}, or $${ for a literal ${)")
		}
		expr := s[i+2 : i+end]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !envName.MatchString(name) {
			return "", true, malformed(fmt.Sprintf("invalid variable name %q in ${%s}; use ${NAME} or ${NAME:-default}", name, expr))
		}
		v, ok := lookup(name)
		switch {
		case hasDef && v == "":
			v = def
		case !ok:
			return "", true, fmt.Errorf("environment variable %s is not set and has no default (write ${%s:-default} to give one)", name, name)
		}
		if template {
			v = templateLiteral.Replace(v)
		}
		b.WriteString(v)
		i += end + 1
	}
	return b.String(), true, nil
}

// envName is a valid variable name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
