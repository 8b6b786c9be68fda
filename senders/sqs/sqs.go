// Package sqs is a sender that delivers messages to an Amazon SQS queue
// (standard or FIFO) with SendMessageBatch, one entry per envelope, and sorts
// whole-call and per-entry failures into the delivery error classes.
package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithy "github.com/aws/smithy-go"

	"github.com/gobridge/gobridge/message"
	"github.com/gobridge/gobridge/routes"
	"github.com/gobridge/gobridge/senders"
)

// Sender sends envelopes to one queue. It is safe for concurrent use.
type Sender struct {
	queueURL  string
	fifo      bool
	group     *message.Template // FIFO only
	attrs     []attribute
	batchSize int
	client    *sqs.Client
	creds     *aws.CredentialsCache // nil: the SDK found none to wrap
	chain     *credentials
	transport *http.Transport // the client's, so that Close can release its connections
	log       *slog.Logger
}

// New builds a Sender from cfg.Options: queue_url (required; a URL ending
// in .fifo is a FIFO queue), region (default: the region in an
// amazonaws.com queue URL, then the SDK's chain), endpoint (an SQS-compatible
// server), message_group_id (a template, FIFO queues only, required there),
// attributes (name: template) and batch_size (1..10, default 10).
// Credentials come from the SDK's default chain. The SDK does not retry:
// gobridge's backoff and concurrency limit see every failure. A nil logger
// discards. ctx bounds loading the AWS configuration only.
func New(ctx context.Context, cfg routes.SenderConfig, logger *slog.Logger) (*Sender, error) {
	o := cfg.Options
	fail := func(format string, args ...any) (*Sender, error) {
		return nil, fmt.Errorf("sqs sender %q: %s", cfg.ID, fmt.Sprintf(format, args...))
	}
	if o.QueueURL == "" {
		return fail("queue_url is required")
	}
	s := &Sender{
		queueURL:  o.QueueURL,
		fifo:      strings.HasSuffix(o.QueueURL, ".fifo"),
		batchSize: cmp.Or(o.BatchSize, MaxBatchSize),
		log:       cmp.Or(logger, slog.New(slog.DiscardHandler)).With("component", "sender", "sender", cfg.ID),
	}
	if s.batchSize < 1 || s.batchSize > MaxBatchSize {
		return fail("batch_size %d is outside 1..%d", o.BatchSize, MaxBatchSize)
	}
	switch {
	case s.fifo && o.MessageGroupID == "":
		return fail("message_group_id is required for the FIFO queue %s", o.QueueURL)
	case !s.fifo && o.MessageGroupID != "":
		return fail("message_group_id is only for FIFO queues (URL ending in .fifo)")
	case s.fifo:
		t, err := message.ParseTemplate(o.MessageGroupID)
		if err != nil {
			return fail("message_group_id: %v", err)
		}
		if lit := literal(t); lit != "" && !validFIFOID(lit) {
			return fail("message_group_id %q: every group ID would hold %q, and SQS takes 1..%d ASCII letters, digits and punctuation", o.MessageGroupID, lit, maxFIFOID)
		}
		s.group = t
	}
	for name, v := range o.Attributes {
		if reason := routes.SQSAttributeNameProblem(name); reason != "" {
			return fail("attribute %q: %s", name, reason)
		}
		if name == IDAttribute {
			return fail("attribute %q is set by gobridge to the envelope ID", name)
		}
		t, err := message.ParseTemplate(v)
		if err != nil {
			return fail("attribute %s: %v", name, err)
		}
		if v == "" {
			return fail("attribute %s is empty: SQS rejects empty attribute values", name)
		}
		if invalidChar([]byte(literal(t))) >= 0 {
			return fail("attribute %s holds a character SQS does not accept", name)
		}
		s.attrs = append(s.attrs, attribute{name: name, value: t})
	}
	if n := len(s.attrs) + 1; n > MaxAttributes {
		return fail("%d attributes plus %s is %d, SQS allows at most %d", len(s.attrs), IDAttribute, n, MaxAttributes)
	}
	slices.SortFunc(s.attrs, func(a, b attribute) int { return strings.Compare(a.name, b.name) })

	// The SDK sends to its region's endpoint whatever the queue URL says,
	// and SQS answers QueueDoesNotExist for a queue of another region: the
	// region of an AWS queue URL wins over the SDK's chain (AWS_REGION is
	// the task's own region on ECS and Lambda). An empty region leaves the
	// chain to find one.
	region := cmp.Or(o.Region, regionOf(o.QueueURL))
	if r := regionOf(o.QueueURL); r != "" && region != r && o.Endpoint == "" {
		return fail("region %s, but the queue %s is in %s: SQS would answer that it does not exist", region, o.QueueURL, r)
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, config.WithRetryMaxAttempts(1), config.WithRegion(region))
	if err != nil {
		return fail("load AWS configuration: %v", err)
	}
	if awsCfg.Region == "" {
		return fail("no region: set options.region or AWS_REGION")
	}
	// The SDK's client with its transport (CA bundle and all) owned here:
	// Close releases its idle connections when a reload replaces the
	// sender, instead of leaving them (a goroutine pair, a descriptor and
	// buffers each) for the transport's 90 s idle timeout. Redirects are not
	// followed, as by the SDK's client.
	if bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient); ok {
		s.transport = bc.GetTransport()
		awsCfg.HTTPClient = &http.Client{Transport: s.transport, Timeout: bc.GetTimeout(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if awsCfg.Credentials != nil {
		s.chain = &credentials{chain: awsCfg.Credentials, load: func(ctx context.Context) (aws.CredentialsProvider, error) {
			c, err := config.LoadDefaultConfig(ctx, config.WithRegion(awsCfg.Region))
			return c.Credentials, err
		}}
		s.creds = aws.NewCredentialsCache(s.chain)
		awsCfg.Credentials = s.creds
	}
	s.client = sqs.NewFromConfig(awsCfg, func(so *sqs.Options) {
		if o.Endpoint != "" {
			so.BaseEndpoint = aws.String(o.Endpoint)
		}
	})
	return s, nil
}

// literal is the literal text of t, placeholders left out: what every
// message's rendering holds, so that what SQS would refuse in it fails New
// (and `gobridge check`) rather than every message.
func literal(t *message.Template) string {
	var b strings.Builder
	for _, p := range t.Split() {
		if p.IsLiteral() {
			b.WriteString(p.LiteralPrefix())
		}
	}
	return b.String()
}

// Close closes the idle connections of the sender's transport. Send must
// not be called after Close.
func (s *Sender) Close() error {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// regionOf returns the region of an AWS queue URL
// (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME), or "".
func regionOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	parts := strings.Split(u.Hostname(), ".")
	if len(parts) >= 4 && parts[0] == "sqs" && parts[2] == "amazonaws" {
		return parts[1]
	}
	return ""
}

// BatchSize returns the configured batch size (1..10).
func (s *Sender) BatchSize() int { return s.batchSize }

// Send delivers envs, in order, in SendMessageBatch calls of at most
// BatchSize entries and MaxBatchBytes bytes, and returns one error per
// envelope (nil: SQS accepted it). A message SQS would refuse (see
// MessageError) fails alone with senders.Permanent; a failed call fails each
// of its entries (classifyCall), except that a call refused for a message's
// sake is split until that message fails alone; a failed entry fails only
// itself (classifyEntry).
// On a FIFO queue a call carries at most one entry per message group, and
// once an entry fails (not permanently) the later entries of its group are
// not sent: they fail with senders.Capacity, so that none overtakes it.
func (s *Sender) Send(ctx context.Context, envs []*message.Envelope) []error {
	errs := make([]error, len(envs))
	entries := make([]entry, 0, len(envs))
	for i, e := range envs {
		en, err := s.build(i, e)
		if err != nil {
			errs[i] = senders.Permanent(err)
			continue
		}
		entries = append(entries, en)
	}
	held := map[string]error{} // FIFO group → why its later entries wait
	for _, batch := range chunks(entries, s.batchSize) {
		batch = slices.DeleteFunc(batch, func(en entry) bool {
			errs[en.index] = held[aws.ToString(en.req.MessageGroupId)]
			return errs[en.index] != nil
		})
		s.sendBatch(ctx, batch, errs)
		for _, en := range batch {
			g := aws.ToString(en.req.MessageGroupId)
			if class, _ := senders.Classify(errs[en.index]); g != "" && held[g] == nil && class != senders.OK && class != senders.Fatal {
				held[g] = senders.Capacity(fmt.Errorf("sqs: %w: group %q: %v", senders.ErrHeld, g, errs[en.index]), 0)
			}
		}
	}
	return errs
}

// errNoResult is an entry the response mentions neither as successful nor
// as failed.
var errNoResult = errors.New("sqs: no result for entry in the SendMessageBatch response")

func (s *Sender) sendBatch(ctx context.Context, batch []entry, errs []error) {
	if len(batch) == 0 {
		return
	}
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: make([]types.SendMessageBatchRequestEntry, len(batch))}
	byID := make(map[string]int, len(batch))
	for i, en := range batch {
		in.Entries[i] = en.req
		byID[*en.req.Id] = en.index
	}
	out, err := s.client.SendMessageBatch(ctx, in)
	if api, ok := errors.AsType[smithy.APIError](err); ok && credentialCodes[errorCode(api.ErrorCode())] && s.creds != nil {
		s.chain.refused() // a rotated key is read at the next call
		s.creds.Invalidate()
	}
	if err != nil {
		err = classifyCall(fmt.Errorf("sqs: send batch of %d to %s: %w", len(batch), s.queueURL, err))
		s.log.Debug("send batch failed", "entries", len(batch), "error", err)
		if class, _ := senders.Classify(err); class == senders.Fatal && len(batch) > 1 {
			// SQS refused the whole call for one message's sake: halve it
			// until that message fails alone and the others go through.
			s.sendBatch(ctx, batch[:len(batch)/2], errs)
			s.sendBatch(ctx, batch[len(batch)/2:], errs)
			return
		}
		for _, en := range batch {
			errs[en.index] = err
		}
		return
	}
	for _, en := range batch {
		errs[en.index] = errNoResult // unless the response mentions it
	}
	for _, ok := range out.Successful {
		if i, found := byID[aws.ToString(ok.Id)]; found {
			errs[i] = nil
		}
	}
	for _, f := range out.Failed {
		if i, found := byID[aws.ToString(f.Id)]; found {
			errs[i] = classifyEntry(f)
		}
	}
}
