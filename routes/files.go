package routes

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
)

// MaxSecretFile bounds the size of a *_file: a secret is small, and a path
// such as /dev/zero must not hang the loader.
const MaxSecretFile = 64 << 10

// loadFiles reads every "*_file" field (tagged file:"NAME") into its
// sibling field NAME, so that components see only the value:
// token_file -> token, password_file -> password, headers_file -> headers
// (one file per header). A value and its file are exclusive; a file that
// cannot be read, is empty or larger than MaxSecretFile is an error at the
// file field's position. Trailing line breaks are trimmed. A file read into
// a template field is escaped to stay literal text. An empty path means no
// file (an unset ${VAR:-}). A file read is then cleared from its field, as
// drain_interval is folded into drain_strategy: after loading, the value
// field alone holds the secret.
func (c *Config) loadFiles() Problems {
	var probs Problems
	c.loadFilesIn(reflect.ValueOf(c).Elem(), "", &probs)
	return probs
}

func (c *Config) loadFilesIn(v reflect.Value, path string, probs *Problems) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c.loadFilesIn(v.Elem(), path, probs)
		}
		return
	case reflect.Slice:
		for i := range v.Len() {
			c.loadFilesIn(v.Index(i), fmt.Sprintf("%s[%d]", path, i), probs)
		}
		return
	case reflect.Struct:
	default:
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		target := f.Tag.Get("file")
		if target == "" {
			c.loadFilesIn(v.Field(i), joinPath(path, name), probs)
			continue
		}
		sf, ok := fieldByYAML(t, target)
		if !ok {
			panic(fmt.Sprintf("routes: %s.%s names no field %q", t.Name(), f.Name, target)) // a schema bug
		}
		c.loadFile(v.Field(i), v.FieldByIndex(sf.Index), sf.Tag.Get("template") == "true",
			joinPath(path, name), joinPath(path, target), probs)
	}
}

// loadFile reads file (a path, or a map of keys to paths) into value; tmpl
// says value is a template field.
func (c *Config) loadFile(file, value reflect.Value, tmpl bool, filePath, valuePath string, probs *Problems) {
	add := func(p Problem) {
		*probs = append(*probs, p)
		c.src.broken[p.path] = true
	}
	switch file.Kind() {
	case reflect.String:
		p := file.String()
		if p == "" {
			return
		}
		if value.String() != "" {
			add(c.Errorf(filePath, "exclusive", "%s and %s are exclusive: set one", valuePath, filePath))
			return
		}
		if s, err := readSecretFile(p); err != nil {
			add(c.Errorf(filePath, "file", "%s: %v", filePath, err))
		} else {
			value.SetString(s)
			file.SetString("")
		}
	case reflect.Map:
		keys := make([]string, 0, file.Len())
		for _, k := range file.MapKeys() {
			keys = append(keys, k.String())
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := file.MapIndex(reflect.ValueOf(k)).String()
			fp := filePath + "." + k
			if p == "" {
				continue
			}
			if other, dup := mapKeyFold(value, k); dup {
				add(c.Errorf(fp, "exclusive", "%s: %s is also set in %s.%s: set one", fp, k, valuePath, other))
				continue
			}
			s, err := readSecretFile(p)
			if err == nil && strings.ContainsAny(s, "\r\n\x00") {
				err = errors.New("the file holds a line break or NUL: a header value is one line")
			}
			if err != nil {
				add(c.Errorf(fp, "file", "%s: %v", fp, err))
				continue
			}
			if tmpl {
				s = templateLiteral.Replace(s)
			}
			if value.IsNil() {
				value.Set(reflect.MakeMap(value.Type()))
			}
			value.SetMapIndex(reflect.ValueOf(k), reflect.ValueOf(s))
			file.SetMapIndex(reflect.ValueOf(k), reflect.Value{})
		}
		if file.Len() == 0 {
			file.SetZero()
		}
	}
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

// fieldByYAML returns the field of struct type t whose yaml name is name.
func fieldByYAML(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); n == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// mapKeyFold returns the key of map m equal to k under case folding.
func mapKeyFold(m reflect.Value, k string) (string, bool) {
	for _, mk := range m.MapKeys() {
		if strings.EqualFold(mk.String(), k) {
			return mk.String(), true
		}
	}
	return "", false
}
