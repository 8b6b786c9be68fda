package routes

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// MaxSecretFile bounds the size of a *_file: a secret is small, and a path
// such as /dev/zero must not hang the loader.
const MaxSecretFile = 64 << 10

// loadFiles reads every *_file field into its value field, so that
// components see only the value: token_file -> token, password_file ->
// password, headers_file -> headers (one file per header). A value and its
// file are exclusive; a file that cannot be read, is empty or larger than
// MaxSecretFile is an error at the file field's position. A header read
// from a file is escaped to stay literal text (headers are templates). An
// empty path means no file (an unset ${VAR:-}). A file read is cleared from
// its field: after loading, the value field alone holds the secret.
func (c *Config) loadFiles() Problems {
	var probs Problems
	// read returns the content of file, the field at fp; conflict, when
	// set, says which value the file would replace.
	read := func(fp, file, conflict string, oneLine bool) (string, bool) {
		if conflict != "" {
			probs = append(probs, c.Errorf(fp, "exclusive", "%s", conflict))
			c.src.broken[fp] = true
			return "", false
		}
		s, err := readSecretFile(file)
		if err == nil && oneLine && strings.ContainsAny(s, "\r\n\x00") {
			err = errors.New("the file holds a line break or NUL: a header value is one line")
		}
		if err != nil {
			probs = append(probs, c.Errorf(fp, "file", "%s: %v", fp, err))
			c.src.broken[fp] = true
		}
		return s, err == nil
	}
	secret := func(path, name string, value *Secret, file *string) {
		fp, conflict := path+"."+name+"_file", ""
		if *value != "" {
			conflict = fmt.Sprintf("%s.%s and %s are exclusive: set one", path, name, fp)
		}
		if *file == "" {
			return
		}
		if s, ok := read(fp, *file, conflict, false); ok {
			*value, *file = Secret(s), ""
		}
	}
	a := &c.Bridge.Admin
	secret("bridge.admin", "token", &a.Token, &a.TokenFile)
	for i := range c.Receivers {
		o := &c.Receivers[i].Options
		path := fmt.Sprintf("receivers[%d].options", i)
		secret(path, "password", &o.Password, &o.PasswordFile)
		secret(path, "token", &o.Token, &o.TokenFile)
		for j := range o.Users {
			u := &o.Users[j]
			secret(fmt.Sprintf("%s.users[%d]", path, j), "password", &u.Password, &u.PasswordFile)
		}
	}
	for i := range c.Senders {
		o := &c.Senders[i].Options
		path := fmt.Sprintf("senders[%d].options", i)
		for _, k := range slices.Sorted(maps.Keys(o.HeadersFile)) {
			fp, conflict := path+".headers_file."+k, ""
			if o.HeadersFile[k] == "" {
				continue
			}
			for h := range o.Headers {
				if strings.EqualFold(h, k) {
					conflict = fmt.Sprintf("%s: %s is also set in %s.headers.%s: set one", fp, k, path, h)
				}
			}
			if s, ok := read(fp, o.HeadersFile[k], conflict, true); ok {
				if o.Headers == nil {
					o.Headers = map[string]string{}
				}
				o.Headers[k] = templateLiteral.Replace(s)
				delete(o.HeadersFile, k)
			}
		}
		if len(o.HeadersFile) == 0 {
			o.HeadersFile = nil
		}
	}
	return probs
}

// readSecretFile reads a secret from path, a regular file (not a device or
// a pipe, which could block the loader): at most MaxSecretFile bytes,
// trailing line breaks trimmed, not empty. Its errors never hold content.
func readSecretFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("cannot read the file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("cannot read %s: %w", path, err)
	case len(b) > MaxSecretFile:
		return "", fmt.Errorf("%s is larger than %d KiB: not a secret file", path, MaxSecretFile>>10)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
