package routes_test

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gobridge/gobridge/routes"
)

// readmeRows returns field -> default cell of the README's config reference.
func readmeRows(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	start := strings.Index(s, "<!-- section: config -->")
	end := strings.Index(s, "<!-- /section: config -->")
	if start < 0 || end < start {
		t.Fatal("README has no config section")
	}
	rows := map[string]string{}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|[^|]*\\|\\s*([^|]*?)\\s*\\|")
	for _, line := range strings.Split(s[start:end], "\n") {
		if m := row.FindStringSubmatch(line); m != nil {
			rows[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return rows
}

// leafPaths lists every configurable field of t as README paths
// ("routes[].policy.ttl").
func leafPaths(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.String {
		leafPaths(t.Elem(), prefix+"[]", out)
		return
	}
	if t.Kind() != reflect.Struct {
		*out = append(*out, prefix)
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		p := name
		if prefix != "" {
			p = prefix + "." + name
		}
		leafPaths(f.Type, p, out)
	}
}

// documented reports whether a README row covers path, directly or by a
// "prefix.*" row.
func documented(rows map[string]string, path string) bool {
	if _, ok := rows[path]; ok {
		return true
	}
	for p := path; p != ""; {
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
		if _, ok := rows[p+".*"]; ok {
			return true
		}
	}
	return false
}

// defaultsFixture is a small config touching every kind of default: every
// receiver type, every sender type, a direct_hold route, a fixed_poll and an
// adaptive shared_outbox route.
const defaultsFixture = `version: 1
bridge: {id: docs}
stores:
  outbox: {type: sqlite}
receivers:
  - {id: plant, type: mqtt, options: {broker_urls: ["tcp://127.0.0.1:1883"]}, topics: [{topic: "#"}]}
  - {id: edge, type: mqtt_listener, topics: [{topic: "#"}]}
  - {id: web, type: http_listener, options: {allow_anonymous: true}, topics: [{topic: "#"}]}
senders:
  - {id: q, type: sqs, options: {queue_url: "https://sqs.example.com/1/q"}}
  - {id: h, type: http, options: {url: "https://example.com/"}}
  - {id: s, type: stdout}
routes:
  - {id: direct, receiver: plant, topic: "a", sender: h, processors: [{type: filter, expr: "true"}], policy: {on_expired: drop}}
  - {id: outbox, receiver: plant, topic: "b", sender: q, delivery_mode: shared_outbox, session: {id: s1}}
  - id: adaptive
    receiver: edge
    topic: c
    sender: s
    delivery_mode: shared_outbox
    session: {id: s2, drain_strategy: {type: adaptive_backoff}}
  - {id: posted, receiver: web, topic: "d", sender: s, delivery_mode: shared_outbox, session: {id: s3}}
`

// dynamoFixture covers the DynamoDB store defaults.
const dynamoFixture = `version: 1
bridge: {id: docs}
stores:
  outbox: {type: dynamodb}
receivers:
  - {id: edge, type: mqtt_listener, topics: [{topic: "#"}]}
senders:
  - {id: s, type: stdout}
routes:
  - {id: r, receiver: edge, topic: "#", sender: s, delivery_mode: shared_outbox, session: {id: s1}}
`

// values resolves a README path in cfg: every value found at it ("[]"
// visits each element).
func values(v reflect.Value, path string) []reflect.Value {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if path == "" {
		return []reflect.Value{v}
	}
	if strings.HasPrefix(path, "[]") {
		var out []reflect.Value
		for i := range v.Len() {
			out = append(out, values(v.Index(i), strings.TrimPrefix(path[2:], "."))...)
		}
		return out
	}
	name, rest := path, ""
	if i := strings.IndexAny(path, ".["); i >= 0 {
		name, rest = path[:i], strings.TrimPrefix(path[i:], ".")
	}
	t := v.Type()
	for i := range t.NumField() {
		if n, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); n == name && t.Field(i).IsExported() {
			return values(v.Field(i), rest)
		}
	}
	return nil
}

// sameValue compares a README default with a value of the config.
func sameValue(doc string, v reflect.Value, bridgeID string) bool {
	doc = strings.ReplaceAll(doc, "BRIDGE_ID", bridgeID)
	switch x := v.Interface().(type) {
	case routes.Duration:
		d, err := time.ParseDuration(doc)
		return err == nil && routes.Duration(d) == x
	case float64:
		f, err := strconv.ParseFloat(doc, 64)
		return err == nil && f == x
	}
	return fmt.Sprint(v.Interface()) == doc
}

// TestREADME_ConfigReferenceMatchesDefaults keeps the README's config
// reference and setDefaults in step: every field is documented, and every
// documented default is the value setDefaults produces.
func TestREADME_ConfigReferenceMatchesDefaults(t *testing.T) {
	rows := readmeRows(t)
	var leaves []string
	leafPaths(reflect.TypeFor[routes.Config](), "", &leaves)
	for _, p := range leaves {
		if !documented(rows, p) {
			t.Errorf("README config reference does not document %s", p)
		}
	}

	var cfgs []*routes.Config
	for _, doc := range []string{defaultsFixture, dynamoFixture} {
		cfg, probs := load(t, doc, nil)
		if probs.HasErrors() {
			t.Fatalf("fixture invalid: %v", probs)
		}
		cfgs = append(cfgs, cfg)
	}
	backticked := regexp.MustCompile("^`([^`]*)`")
	checked := 0
	isLeaf := map[string]bool{}
	for _, p := range leaves {
		isLeaf[p] = true
	}
	for path, cell := range rows {
		if !isLeaf[path] {
			continue
		}
		var found []reflect.Value
		for _, cfg := range cfgs {
			found = append(found, values(reflect.ValueOf(cfg), path)...)
		}
		m := backticked.FindStringSubmatch(cell)
		if m == nil {
			// "none": optional without default; the fixtures never set
			// these, so setDefaults must leave them empty.
			for _, v := range found {
				if !v.IsZero() && cell == "none" {
					t.Errorf("%s: README says no default but setDefaults sets %v", path, v.Interface())
				}
			}
			continue
		}
		ok := false
		for _, v := range found {
			ok = ok || sameValue(m[1], v, "docs")
		}
		if !ok {
			var got []string
			for _, v := range found {
				got = append(got, fmt.Sprint(v.Interface()))
			}
			t.Errorf("%s: README default %q, setDefaults gives %v", path, m[1], got)
		}
		checked++
	}
	if checked < 25 {
		t.Errorf("only %d defaults checked; is the README table format intact?", checked)
	}
}
