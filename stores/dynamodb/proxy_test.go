package dynamodb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/gobridge/gobridge/internal/testservices"
	"github.com/gobridge/gobridge/stores/dynamodb"
)

// fault is what the proxy does with one call.
type fault struct {
	status int    // an error answer: its HTTP status (and __type, message)
	typ    string // the awsJson1_0 __type, without its namespace
	msg    string
	// reasons, for a TransactionCanceledException: one code per item of
	// the transaction; the last one repeats for the items beyond.
	reasons []string
	reset   bool // forward the call, then reset the connection: the answer is lost
	hang    bool // forward the call, then answer nothing until the client gives up
	// unprocessed answers a BatchGetItem with every key unprocessed (as a
	// throttled table does), without forwarding it.
	unprocessed bool
	// after runs once the call was forwarded (reset, hang).
	after func()
}

// proxy is a fault-injecting HTTP proxy in front of DynamoDB Local: rule
// says, per call, by operation (TransactWriteItems, UpdateItem, ...) and
// its number among the calls of that operation (from 1), what to do; nil
// forwards it.
type proxy struct {
	t    testing.TB
	srv  *httptest.Server
	next string
	mu   sync.Mutex
	rule func(op string, n int) *fault
	n    map[string]int
}

func newProxy(t testing.TB) *proxy {
	p := &proxy{t: t, next: testservices.DynamoDBEndpoint(t), n: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// set replaces the rule and restarts the counts.
func (p *proxy) set(rule func(op string, n int) *fault) {
	p.mu.Lock()
	p.rule, p.n = rule, map[string]int{}
	p.mu.Unlock()
}

// calls returns how many calls of op the proxy saw since the last set.
func (p *proxy) calls(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[op]
}

// open returns a Store on the shared table whose calls go through p, with
// opts applied to its client.
func (p *proxy) open(t testing.TB, opts ...func(*awsddb.Options)) *dynamodb.Store {
	t.Helper()
	table := sharedTable(t)
	client := newClient(t, nil, append([]func(*awsddb.Options){func(o *awsddb.Options) {
		o.BaseEndpoint = aws.String(p.srv.URL)
		// A fresh connection per call: a connection the proxy reset is
		// never reused.
		o.HTTPClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	}}, opts...)...)
	s, err := dynamodb.Open(context.Background(), dynamodb.Options{Table: table, Client: client})
	if err != nil {
		t.Fatalf("Open through the proxy: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func (p *proxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	p.mu.Lock()
	p.n[op]++
	var f *fault
	if p.rule != nil {
		f = p.rule(op, p.n[op])
	}
	p.mu.Unlock()
	switch {
	case f == nil:
		p.forward(w, r, body)
	case f.unprocessed:
		var in struct{ RequestItems json.RawMessage }
		_ = json.Unmarshal(body, &in)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		fmt.Fprintf(w, `{"Responses":{},"UnprocessedKeys":%s}`, in.RequestItems)
	case f.reset || f.hang:
		res := httptest.NewRecorder()
		p.forward(res, r, body) // DynamoDB Local applies it
		if f.after != nil {
			f.after()
		}
		if f.hang {
			<-r.Context().Done()
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			p.t.Errorf("proxy: hijack: %v", err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with RST: "connection reset by peer"
		}
		conn.Close()
	default:
		p.fail(w, f, body)
	}
}

// fail answers as DynamoDB does when it refuses a call.
func (p *proxy) fail(w http.ResponseWriter, f *fault, body []byte) {
	out := map[string]any{"__type": "com.amazonaws.dynamodb.v20120810#" + f.typ, "message": f.msg}
	if f.reasons != nil {
		var in struct{ TransactItems []json.RawMessage }
		_ = json.Unmarshal(body, &in)
		var rs []map[string]string
		for i := range in.TransactItems {
			c := f.reasons[min(i, len(f.reasons)-1)]
			r := map[string]string{"Code": c}
			if c != "None" {
				r["Message"] = c
			}
			rs = append(rs, r)
		}
		out["CancellationReasons"], out["Message"] = rs, "Transaction cancelled, please refer cancellation reasons for specific reasons"
		delete(out, "message")
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(f.status)
	_ = json.NewEncoder(w).Encode(out)
}

func (p *proxy) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	req, err := http.NewRequest(r.Method, p.next+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		p.t.Errorf("proxy: %v", err)
		return
	}
	req.Header = r.Header.Clone()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	for k, v := range res.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// The errors DynamoDB answers a throttled or failing table with.
var (
	throttled   = &fault{status: 400, typ: "ThrottlingException", msg: "Rate of requests exceeds the allowed throughput."}
	provisioned = &fault{status: 400, typ: "ProvisionedThroughputExceededException",
		msg: "The level of configured provisioned throughput for the table was exceeded."}
	limitExceeded = &fault{status: 400, typ: "RequestLimitExceeded", msg: "Throughput exceeds the current throughput limit for your account."}
	inProgress    = &fault{status: 400, typ: "TransactionInProgressException", msg: "The transaction with the given request token is already in progress."}
	internal      = &fault{status: 500, typ: "InternalServerError", msg: "Internal server error"}
	unavailable   = &fault{status: 503, typ: "ServiceUnavailable", msg: "Service unavailable"}
)

// cancelled is a TransactionCanceledException with codes (see fault.reasons).
func cancelled(codes ...string) *fault {
	return &fault{status: 400, typ: "TransactionCanceledException", reasons: codes}
}
