package sqs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	smithy "github.com/aws/smithy-go"

	"github.com/gobridge/gobridge/senders"
)

// throttleCodes are the error codes that mean "slow down": the SDK's own
// list plus the SQS and KMS codes.
var throttleCodes = func() map[string]bool {
	m := map[string]bool{"KmsThrottled": true, "KMS.ThrottlingException": true}
	for c := range retry.DefaultThrottleErrorCodes {
		m[c] = true
	}
	return m
}()

// messageCodes are the error codes that say this message (not the queue,
// the credentials or the service) can never be accepted (DESIGN.md §11.3);
// every other error is the target's and is retried.
var messageCodes = map[string]bool{
	"InvalidMessageContents": true,
	"MessageTooLong":         true,
	"InvalidAttributeName":   true,
	"InvalidAttributeValue":  true,
	"InvalidParameterValue":  true,
	"BatchRequestTooLong":    true,
}

// errorCode is code without the prefix of SQS's query error codes: AWS
// names some errors so in its x-amzn-query-error header, and the SDK
// reports that name (AWS.SimpleQueueService.BatchRequestTooLong).
func errorCode(code string) string {
	return strings.TrimPrefix(code, "AWS.SimpleQueueService.")
}

// classifyCall sorts the error of a whole SendMessageBatch call:
//
//	throttling (*types.RequestThrottled, *types.KmsThrottled, a throttling
//	  error code, HTTP 429)                         senders.Capacity
//	a message error code (messageCodes)             senders.Permanent
//	anything else (AccessDenied, QueueDoesNotExist, credentials, KMS,
//	  5xx, network, ctx cancelled or timed out)     transient
func classifyCall(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_, throttled := errors.AsType[*types.RequestThrottled](err)
	_, kmsThrottled := errors.AsType[*types.KmsThrottled](err)
	status := 0
	if re, ok := errors.AsType[interface {
		error
		HTTPStatusCode() int
	}](err); ok {
		status = re.HTTPStatusCode()
	}
	code := ""
	if api, ok := errors.AsType[smithy.APIError](err); ok {
		code = errorCode(api.ErrorCode())
	}
	switch {
	case throttled, kmsThrottled, throttleCodes[code], status == 429:
		return senders.Capacity(err, 0)
	case messageCodes[code]:
		return senders.Permanent(err)
	}
	return err
}

// EntryError is one entry of a batch that SQS refused while accepting the
// call (a BatchResultErrorEntry).
type EntryError struct {
	Code        string
	Message     string
	SenderFault bool
}

func (e *EntryError) Error() string {
	fault := "server"
	if e.SenderFault {
		fault = "sender"
	}
	return fmt.Sprintf("sqs: entry failed: %s (%s fault): %s", e.Code, fault, e.Message)
}

// classifyEntry sorts a failed entry as classifyCall does, except that a
// message error code is permanent only as a sender fault.
func classifyEntry(f types.BatchResultErrorEntry) error {
	e := &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
	switch code := errorCode(e.Code); {
	case throttleCodes[code]:
		return senders.Capacity(e, 0)
	case e.SenderFault && messageCodes[code]:
		return senders.Permanent(e)
	}
	return e
}
