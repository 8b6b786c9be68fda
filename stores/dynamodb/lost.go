package dynamodb

import (
	"context"
	"errors"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	smithymw "github.com/aws/smithy-go/middleware"
)

// lost reports whether a transaction that failed with err may have
// committed, its answer lost: unless each attempt was refused, after a
// dropped connection, a timeout once the request was sent (status 0), or a
// server error. The SDK's retry of an attempt whose answer was lost may be
// refused (throttled, or in progress still): lost too (lostError).
func lost(err error) bool {
	_, le := errors.AsType[*lostError](err)
	return le || !refused(err)
}

// refused reports whether DynamoDB refused the call (a 4xx answer: a
// cancellation, throttling, an invalid request), so did not apply it.
func refused(err error) bool {
	re, ok := errors.AsType[*awshttp.ResponseError](err)
	return ok && re.HTTPStatusCode()/100 == 4
}

// lostError is the error of a call that DynamoDB may have applied: one of
// its attempts (the SDK retries) ended without DynamoDB's refusal (a 4xx
// answer), though a later one was refused.
type lostError struct{ err error }

func (e *lostError) Error() string { return e.err.Error() }
func (e *lostError) Unwrap() error { return e.err }

// noteApplied is an option of a call that sets *maybe when one of its
// attempts may have been applied: it failed and was not refused.
func noteApplied(maybe *bool) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *smithymw.Stack) error {
			return st.Finalize.Insert(smithymw.FinalizeMiddlewareFunc("gobridgeNoteApplied", func(
				ctx context.Context, in smithymw.FinalizeInput, next smithymw.FinalizeHandler,
			) (smithymw.FinalizeOutput, smithymw.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				if err != nil && !refused(err) {
					*maybe = true
				}
				return out, md, err
			}), "Retry", smithymw.After)
		})
	}
}
