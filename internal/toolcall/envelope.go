// Package toolcall calls a tool: it decodes and validates the tool's
// arguments into the RPC's request message, calls the service with the
// caller's mesh identity and an idempotency key, and answers with the one
// envelope every tool result carries (docs/tools.md). The edge uses it for
// tools/call; workers use it to run a tool call as an activity.
package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Domain codes of error envelopes (docs/tools.md). A model reads them to decide
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

// Codes are the domain codes an error envelope can carry, sorted.
func Codes() []string { return slices.Sorted(maps.Keys(errorTypes)) }

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
	// Untrusted names the fields of Data (dotted paths) that hold text
	// written outside the mesh: the text content marks their values
	// (MarkedText), the structured content keeps them as they are.
	Untrusted []string `json:"untrusted,omitempty"`
	// Notes say what the call did instead of something its client could not
	// give: a question's fallback (toolmesh.tool.v1.Question), e.g. queries
	// derived from the question because the client offers no sampling.
	Notes []string `json:"notes,omitempty"`

	Tool       string `json:"tool,omitempty"`
	ErrorType  string `json:"error_type,omitempty"`
	DomainCode string `json:"domain_code,omitempty"`
	Message    string `json:"message,omitempty"`
	// ErrorID names the logged cause of an error the caller cannot act on
	// (internal, and unavailable when a service was busy or unreachable):
	// an operator finds the cause by it (docs/errors.md).
	ErrorID    string               `json:"error_id,omitempty"`
	Violation  string               `json:"violation,omitempty"`
	Violations []boundary.Violation `json:"violations,omitempty"`
	// Gap names what a capability_gap call lacks: a service's capability,
	// or, prefixed ClientGapPrefix, the client's (ClientGap).
	Gap string `json:"gap,omitempty"`
	// RetryAfterSeconds tells a rate-limited caller when to try again.
	RetryAfterSeconds int `json:"retry_after_seconds,omitempty"`

	// Replayed is true when the service answered with the result of an
	// earlier call and changed nothing; ReplayOf is that call's idempotency
	// key (internal/idempotency). For the audit trail, not the client.
	Replayed bool   `json:"-"`
	ReplayOf string `json:"-"`

	// Visit is the page the service asked the person to visit before it
	// can make the call (toolmesh.tool.v1.VisitRequired; nothing was
	// done): the pipeline asks it as a URL input request of a client that
	// can be sent there. The envelope itself is VisitNeeded's, for any
	// other client.
	Visit *toolv1.VisitRequired `json:"-"`

	// encoded is Data when a binding wrote it from the service's answer:
	// protojson's output, valid JSON, which Marshal need not check.
	encoded []byte
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

// ClientGapPrefix starts the Gap of a call that needs something its client
// did not declare: "client." and the MCP client capability, "sampling",
// "roots" or "elicitation.url".
const ClientGapPrefix = "client."

// ClientGap is the capability_gap envelope of a call that needs capability
// of its client, which the client did not declare (docs/errors.md, "What a
// client lacks"). At 2026-07-28 the door answers -32021 instead.
func ClientGap(tool, capability string) *Envelope {
	env := Fail(tool, CodeCapabilityGap, fmt.Sprintf("%s needs the client's %s capability, which this client did not declare; call it from a client that offers it", tool, capability))
	env.Gap = ClientGapPrefix + capability
	return env
}

// CapabilityURL is the client capability of URL elicitation.
const CapabilityURL = "elicitation.url"

// VisitNeeded is the envelope of a call whose service asked the person to
// visit a page first (toolmesh.tool.v1.VisitRequired), for a client that
// cannot be sent there (no URL elicitation): a ClientGap whose message
// carries the link, so that the person can open it and call again
// (docs/errors.md, "What a client lacks"). Visit holds v.
func VisitNeeded(tool string, v *toolv1.VisitRequired) *Envelope {
	env := Fail(tool, CodeCapabilityGap, fmt.Sprintf("%s needs the person to visit %s first: %s Open that link, then call %s again. (The client's elicitation.url capability would have offered the link itself; this client did not declare it.)",
		tool, v.GetUrl(), strings.TrimSpace(v.GetMessage()), tool))
	env.Gap = ClientGapPrefix + CapabilityURL
	env.Visit = v
	return env
}

// ClientCapability is the client capability e lacks ("" when env is not a
// ClientGap).
func (e *Envelope) ClientCapability() string {
	if e == nil || e.DomainCode != CodeCapabilityGap {
		return ""
	}
	c, ok := strings.CutPrefix(e.Gap, ClientGapPrefix)
	if !ok {
		return ""
	}
	return c
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

// Internal is the internal envelope of an unexpected error whose cause was
// logged under id: a fixed message and the id, nothing of the cause.
func Internal(tool, id string) *Envelope {
	env := Fail(tool, CodeInternal, rpcerror.WithID(rpcerror.MessageInternal, id))
	env.ErrorID = id
	return env
}

// Unexpected is the envelope of an error the caller cannot act on: its cause
// is logged under a fresh error id (one tool.error event) and the caller
// gets Internal.
func Unexpected(ctx context.Context, log *slog.Logger, tool string, cause error) *Envelope {
	id := rpcerror.NewID()
	logCause(ctx, log, tool, id, CodeInternal, cause)
	return Internal(tool, id)
}

func logCause(ctx context.Context, log *slog.Logger, tool, id, code string, cause error) {
	level := slog.LevelWarn
	if code == CodeInternal {
		level = slog.LevelError
	}
	log.Log(ctx, level, "tool.error", "error_id", id, "tool", tool, "domain_code", code, "error", cause)
}

// FromError maps an error from a service call to its envelope. A message
// the service chose is passed on; the text of an error the service did not
// send (a refused connection, a protocol failure) never is: it is logged
// under an error id.
func FromError(ctx context.Context, log *slog.Logger, tool string, err error) *Envelope {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		if errors.Is(err, context.DeadlineExceeded) {
			return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
		}
		return Unexpected(ctx, log, tool, err)
	}
	if !connect.IsWireError(err) {
		switch ce.Code() {
		case connect.CodeDeadlineExceeded, connect.CodeCanceled:
			return fromCode(ctx, tool, ce.Code(), "")
		case connect.CodeUnavailable:
			id := rpcerror.NewID()
			logCause(ctx, log, tool, id, CodeUnavailable, err)
			env := Fail(tool, CodeUnavailable, rpcerror.WithID(rpcerror.MessageUnreachable, id))
			env.ErrorID = id
			return env
		}
		return Unexpected(ctx, log, tool, err)
	}
	id := rpcerror.ID(err)
	switch ce.Code() {
	case connect.CodeInternal, connect.CodeUnknown:
		if id == "" {
			// A service that did not translate its error: its text stays here.
			return Unexpected(ctx, log, tool, err)
		}
		return Internal(tool, id)
	}
	v, verr := mesh.VisitRequired(ce)
	if verr != nil {
		// A service's bug: the person is never sent to such a page.
		return Unexpected(ctx, log, tool, verr)
	}
	if v != nil {
		env := VisitNeeded(tool, v)
		env.ErrorID = id
		return env
	}
	env := fromCode(ctx, tool, ce.Code(), ce.Message())
	if gap, ok := mesh.CapabilityGap(ce); ok {
		env = Fail(tool, CodeCapabilityGap, fmt.Sprintf("the service lacks %s: %s", gap, ce.Message()))
		env.Gap = gap
	} else if vs := boundary.ViolationsFromError(ce); len(vs) > 0 && env.DomainCode == CodeInvalidArgument {
		env = Invalid(tool, vs)
	}
	if env.DomainCode == CodeRateLimited || env.DomainCode == CodeUnavailable {
		// When the service says when to try again (an outside API's rate
		// limit), so does the envelope.
		env.RetryAfterSeconds = retryAfterSeconds(ce)
	}
	env.ErrorID = id
	return env
}

// fromCode is the envelope of a service's answer with code and msg.
func fromCode(ctx context.Context, tool string, code connect.Code, msg string) *Envelope {
	switch code {
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		return Fail(tool, CodeInvalidArgument, msg)
	case connect.CodeNotFound:
		return Fail(tool, CodeNotFound, msg)
	case connect.CodeAlreadyExists, connect.CodeAborted, connect.CodeFailedPrecondition:
		return Fail(tool, CodeConflict, msg)
	case connect.CodeResourceExhausted:
		return Fail(tool, CodeRateLimited, msg)
	case connect.CodePermissionDenied:
		return Fail(tool, CodePermissionDenied, msg)
	case connect.CodeUnauthenticated:
		return Fail(tool, CodeUnauthenticated, msg)
	case connect.CodeUnimplemented:
		return Fail(tool, CodeNotSupported, msg)
	case connect.CodeUnavailable:
		return Fail(tool, CodeUnavailable, msg)
	case connect.CodeDeadlineExceeded:
		return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
	case connect.CodeCanceled:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return Fail(tool, CodeDeadlineExceeded, "the service did not answer in time")
		}
		return Fail(tool, CodeUnavailable, "the call was cancelled")
	}
	// DataLoss and any other code: a message the service chose.
	return Fail(tool, CodeInternal, msg)
}

// Marshal is env as JSON: the bytes json.Marshal writes, without its
// reflection for the common envelope, a success with data and nothing
// else (its data compacted and HTML-escaped as json.Marshal does a
// json.RawMessage).
func Marshal(env *Envelope) ([]byte, error) {
	rest := *env
	rest.Status, rest.Data, rest.encoded = "", nil, nil
	if env.Status != "ok" || len(env.Data) == 0 || !reflect.ValueOf(rest).IsZero() {
		return json.Marshal(env)
	}
	const head = `{"status":"ok","data":`
	if env.dataEncoded() {
		out := make([]byte, 0, len(head)+len(env.Data)+1)
		out = appendCompactJSON(append(out, head...), env.Data)
		return append(out, '}'), nil
	}
	var compact bytes.Buffer
	compact.Grow(len(env.Data))
	if err := json.Compact(&compact, env.Data); err != nil {
		return json.Marshal(env) // its error names the field
	}
	out := bytes.NewBuffer(make([]byte, 0, compact.Len()+32))
	out.WriteString(head)
	json.HTMLEscape(out, compact.Bytes())
	out.WriteByte('}')
	return out.Bytes(), nil
}

// dataEncoded reports whether e's Data is what a binding encoded, not
// data set since.
func (e *Envelope) dataEncoded() bool {
	return len(e.encoded) > 0 && len(e.encoded) == len(e.Data) && &e.encoded[0] == &e.Data[0]
}

// appendCompactJSON appends src, which must be valid JSON, as json.Marshal
// writes a json.RawMessage: without whitespace between its tokens, and
// with <, >, &, U+2028 and U+2029 escaped. It is json.Compact and
// json.HTMLEscape in one pass that does not check src.
func appendCompactJSON(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case inString && c == '\\' && i+1 < len(src):
			dst = append(dst, c, src[i+1])
			i++
			continue
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			continue
		case c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8:
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			i += 2
			continue
		}
		dst = append(dst, c)
	}
	return dst
}
