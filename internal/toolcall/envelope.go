// Package toolcall calls a tool: it decodes and validates the tool's
// arguments into the RPC's request message, calls the service with the
// caller's mesh identity and an idempotency key, and answers with the one
// envelope every tool result carries (DESIGN §4). The edge uses it for
// tools/call; workers use it to run a tool call as an activity.
package toolcall

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

// Domain codes of error envelopes (DESIGN §4). A model reads them to decide
// whether to fix its arguments, wait, or give up.
const (
	CodeInvalidArgument   = "invalid_argument"
	CodeGuardrailViolated = "guardrail_violated"
	CodePermissionDenied  = "permission_denied"
	CodeUnauthenticated   = "unauthenticated"
	CodeNotFound          = "not_found"
	CodeConflict          = "conflict"
	CodeRateLimited       = "rate_limited"
	CodeReadOnly          = "read_only"
	CodeNotSupported      = "not_supported"
	CodeCapabilityGap     = "capability_gap"
	CodeUnavailable       = "unavailable"
	CodeDeadlineExceeded  = "deadline_exceeded"
	CodeInternal          = "internal"
	// CodeDeclined: the user declined or cancelled a question the call
	// asked (multi-round elicitation); nothing was done.
	CodeDeclined = "declined"
)

// errorTypes names the error class of each domain code.
var errorTypes = map[string]string{
	CodeInvalidArgument:   "ArgumentValidationError",
	CodeGuardrailViolated: "GuardrailViolationError",
	CodePermissionDenied:  "PermissionDeniedError",
	CodeUnauthenticated:   "UnauthenticatedError",
	CodeNotFound:          "NotFoundError",
	CodeConflict:          "ConflictError",
	CodeRateLimited:       "RateLimitError",
	CodeReadOnly:          "ReadOnlyError",
	CodeNotSupported:      "NotSupportedError",
	CodeCapabilityGap:     "CapabilityGapError",
	CodeUnavailable:       "UnavailableError",
	CodeDeadlineExceeded:  "DeadlineExceededError",
	CodeInternal:          "InternalError",
	CodeDeclined:          "DeclinedError",
}

// Pagination is the page a list tool returned.
type Pagination struct {
	Offset     int32  `json:"offset"`
	Limit      int32  `json:"limit"`
	Total      int32  `json:"total"`
	NextOffset *int32 `json:"next_offset,omitempty"`
}

// Envelope is the one shape of every tool result. It is sent as
// structuredContent and, byte for byte, as the JSON text content.
type Envelope struct {
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data,omitempty"`
	Pagination *Pagination     `json:"pagination,omitempty"`

	Tool       string               `json:"tool,omitempty"`
	ErrorType  string               `json:"error_type,omitempty"`
	DomainCode string               `json:"domain_code,omitempty"`
	Message    string               `json:"message,omitempty"`
	Violation  string               `json:"violation,omitempty"`
	Violations []boundary.Violation `json:"violations,omitempty"`
	// Gap names what a capability_gap backend lacks.
	Gap string `json:"gap,omitempty"`
	// RetryAfterSeconds tells a rate-limited caller when to try again.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`
}

// IsError reports whether e is an error envelope.
func (e *Envelope) IsError() bool { return e.Status != "ok" }

// OK is a success envelope.
func OK(data json.RawMessage, p *Pagination) *Envelope {
	if len(data) == 0 {
		data = json.RawMessage("{}")
	}
	return &Envelope{Status: "ok", Data: data, Pagination: p}
}

// Fail is an error envelope for tool with a domain code and a message. The
// message is scrubbed of secret-shaped text.
func Fail(tool, code, message string) *Envelope {
	et, ok := errorTypes[code]
	if !ok {
		code, et = CodeInternal, errorTypes[CodeInternal]
	}
	return &Envelope{
		Status:     "error",
		Tool:       tool,
		ErrorType:  et,
		DomainCode: code,
		Message:    logging.Scrub(message),
	}
}

// Invalid is an invalid_argument envelope listing the violations.
func Invalid(tool string, vs []boundary.Violation) *Envelope {
	e := Fail(tool, CodeInvalidArgument, boundary.Summary(vs))
	e.Violations = vs
	for i := range e.Violations {
		// A field path can be caller-chosen (an unknown argument's name).
		e.Violations[i].Field = logging.Scrub(e.Violations[i].Field)
		e.Violations[i].Message = logging.Scrub(e.Violations[i].Message)
	}
	return e
}

// FromError maps an error from a service call to its envelope.
func FromError(ctx context.Context, tool string, err error) *Envelope {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if errors.Is(err, context.DeadlineExceeded) {
			return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
		}
		return Fail(tool, CodeInternal, err.Error())
	}
	msg := ce.Message()
	if gap, ok := mesh.CapabilityGap(ce); ok {
		env := Fail(tool, CodeCapabilityGap, fmt.Sprintf("the service lacks %s: %s", gap, msg))
		env.Gap = gap
		return env
	}
	switch ce.Code() {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		if vs := boundary.ViolationsFromError(ce); len(vs) > 0 {
			return Invalid(tool, vs)
		}
		return Fail(tool, CodeInvalidArgument, msg)
	case connect.CodeNotFound:
		return Fail(tool, CodeNotFound, msg)
	case connect.CodeAlreadyExists, connect.CodeAborted, connect.CodeFailedPrecondition:
		return Fail(tool, CodeConflict, msg)
	case connect.CodeResourceExhausted:
		env := Fail(tool, CodeRateLimited, msg)
		env.RetryAfterSeconds = retryAfterSeconds(ce)
		return env
	case connect.CodePermissionDenied:
		return Fail(tool, CodePermissionDenied, msg)
	case connect.CodeUnauthenticated:
		return Fail(tool, CodeUnauthenticated, msg)
	case connect.CodeUnimplemented:
		return Fail(tool, CodeNotSupported, msg)
	case connect.CodeUnavailable:
		// A service that answers Unavailable itself says why (something
		// it depends on is down); otherwise the service was not reached.
		text := msg
		if !connect.IsWireError(ce) {
			text = "the service is unavailable: " + unwrapDial(msg)
		}
		env := Fail(tool, CodeUnavailable, text)
		env.RetryAfterSeconds = retryAfterSeconds(ce)
		return env
	case connect.CodeDeadlineExceeded:
		return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
	case connect.CodeCanceled:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
		}
		return Fail(tool, CodeUnavailable, "the call was cancelled")
	}
	return Fail(tool, CodeInternal, msg)
}

// unwrapDial shortens transport errors to their last, most specific part.
func unwrapDial(msg string) string {
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		return msg[i+2:]
	}
	return msg
}
