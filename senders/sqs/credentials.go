package sqs

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// credentialCodes are the error codes of a call that SQS refused for its
// credentials: the sender loads the SDK's chain again before the next call.
var credentialCodes = map[string]bool{
	"InvalidClientTokenId": true, "UnrecognizedClientException": true, "InvalidAccessKeyId": true,
	"ExpiredToken": true, "ExpiredTokenException": true, "SignatureDoesNotMatch": true,
	"InvalidSignatureException": true, "IncompleteSignature": true, "AccessDenied": true, "AccessDeniedException": true,
}

// credentials is the SDK's credential chain, loaded again (load) once SQS
// refused what it gave or it failed. The SDK reads static keys once, so a
// key rotated in the shared credentials file was never used before a
// restart, and every retry of the target's "failure" was refused again.
type credentials struct {
	load func(context.Context) (aws.CredentialsProvider, error)

	mu     sync.Mutex
	chain  aws.CredentialsProvider
	reload bool
}

func (c *credentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	c.mu.Lock()
	if c.reload {
		if p, err := c.load(ctx); err == nil && p != nil {
			c.chain, c.reload = p, false
		}
	}
	p := c.chain
	c.mu.Unlock()
	v, err := p.Retrieve(ctx)
	if err != nil {
		c.refused()
	}
	return v, err
}

// refused marks the chain to be loaded again at the next Retrieve.
func (c *credentials) refused() {
	c.mu.Lock()
	c.reload = true
	c.mu.Unlock()
}
