package routes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Load reads the config file at path and returns it with defaults applied,
// together with every problem found (see Parse). The error is non-nil only
// when the file cannot be read.
func Load(path string) (*Config, Problems, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("load config: %w", err)
	}
	defer f.Close()
	return Parse(f, path)
}

// Parse decodes a config from r, naming it file in problems: it expands
// ${VAR} and ${VAR:-default} from the environment, decodes strictly, reads
// the files that *_file fields (token_file, password_file, headers_file)
// name into their values, applies the defaults and validates. It returns
// every problem found, sorted by position; the config is usable only when
// !problems.HasErrors(), and nil when the document could not be decoded at
// all (a YAML syntax error, or not a mapping). The error is non-nil only
// when r fails. Parse has no side effects: it reads the environment and
// those files, and nothing else.
func Parse(r io.Reader, file string) (*Config, Problems, error) {
	return ParseWithEnv(r, file, os.LookupEnv)
}

// ParseWithEnv is Parse with lookup in place of the process environment.
func ParseWithEnv(r io.Reader, file string, lookup func(string) (string, bool)) (*Config, Problems, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, fmt.Errorf("read config %s: %w", file, err)
	}
	cfg, probs := decode(data, file, lookup)
	if cfg != nil {
		probs = append(probs, cfg.loadFiles()...)
		cfg.setDefaults()
		probs = append(probs, cfg.Validate()...)
	}
	probs.Sort()
	return cfg, probs, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlProblem is a problem of the document as a whole, at n. yaml.v3
// reports only a line, in the error text; the column is then 1.
func yamlProblem(file string, n yaml.Node, err error) Problems {
	p := Problem{File: file, Line: max(n.Line, 1), Column: max(n.Column, 1), Rule: "yaml-syntax", Severity: SeverityError, Message: err.Error()}
	if m := yamlLine.FindStringSubmatch(p.Message); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		p.Column, p.Message = 1, m[2]
	}
	return Problems{p}
}

// unreadable is the position of the first character yaml.v3 refuses to
// read (a byte that is not UTF-8, such as a Latin-1 "ü"; a control
// character YAML does not allow), which it reports without a line; the
// zero Node when there is none.
func unreadable(data []byte) yaml.Node {
	n := yaml.Node{Line: 1, Column: 1}
	for b := bytes.TrimPrefix(data, []byte("\uFEFF")); len(b) > 0; {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		switch {
		case r == utf8.RuneError && size == 1, r < 0x20 && r != '\t' && r != '\n' && r != '\r', r >= 0x7f && r < 0xa0 && r != 0x85,
			r >= 0xd800 && r < 0xe000, r == 0xfffe, r == 0xffff:
			return n
		case r == '\n':
			n.Line, n.Column = n.Line+1, 1
		default:
			n.Column++
		}
	}
	return yaml.Node{}
}

var unknownAnchor = regexp.MustCompile(`^yaml: unknown anchor '(.*)' referenced$`)

// unplaced is where the error yaml.v3 reports without a line is: the first
// character it cannot read (unreadable), or the first alias of an unknown
// anchor outside comments; the zero Node when neither is found.
func unplaced(data []byte, err error) yaml.Node {
	m := unknownAnchor.FindStringSubmatch(err.Error())
	if m == nil {
		return unreadable(data)
	}
	for i, line := range strings.Split(string(data), "\n") {
		if c := strings.Index(" "+line, " #"); c >= 0 {
			line = line[:c]
		}
		for j := 0; j < len(line); j++ {
			end := j + 1 + len(m[1])
			if strings.HasPrefix(line[j:], "*"+m[1]) && (j == 0 || strings.ContainsRune(" \t[{,", rune(line[j-1]))) &&
				(end == len(line) || strings.ContainsRune(" \t,]}", rune(line[end]))) {
				return yaml.Node{Line: i + 1, Column: utf8.RuneCountInString(line[:j]) + 1}
			}
		}
	}
	return yaml.Node{}
}

func decode(data []byte, file string, lookup func(string) (string, bool)) (*Config, Problems) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return nil, yamlProblem(file, yaml.Node{}, errors.New("the file is empty"))
	} else if err != nil {
		return nil, yamlProblem(file, unplaced(data, err), err)
	}
	if err := dec.Decode(&extra); err == nil {
		return nil, yamlProblem(file, extra, errors.New("more than one YAML document; a config is a single document"))
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlProblem(file, unplaced(data, err), err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	src := source{file: file, index: map[string]pos{}, broken: map[string]bool{}, zero: map[string]string{}}
	w := &walker{src: src, lookup: lookup}
	if root.Kind != yaml.MappingNode {
		w.errorf(root, "", "wrong-type", "config: expected a mapping of version, bridge, stores, receivers, senders and routes, got %s", kindName(root))
		return nil, w.probs
	}
	w.walk(root, reflect.TypeFor[Config](), "")
	cfg := &Config{}
	if err := root.Decode(cfg); err != nil {
		// The walker removes everything that fails to decode; report what
		// slipped through rather than run a config half decoded.
		w.errorf(root, "", "wrong-type", "%v", err)
		return nil, w.probs
	}
	cfg.src = src
	return cfg, w.probs
}
