// Package boundary is where untrusted input is checked. Each place that
// parses input from outside has a label (mcp.tool, grpc.request, jwt, ...);
// a rejection there is reported in one shape, as Violations, and logged as
// exactly one boundary.validation_failed event.
package boundary

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"github.com/toolmesh/toolmesh/internal/logging"
	"google.golang.org/protobuf/proto"
)

// Labels of the mesh's boundaries.
const (
	MCPTool      = "mcp.tool"
	GRPCRequest  = "grpc.request"
	JWT          = "jwt"
	RequestState = "request_state"
	Webhook      = "webhook.payload"
	AuditChain   = "audit_chain"
	// A2AJSONRPC is the params of an inbound A2A JSON-RPC request.
	A2AJSONRPC = "a2a.jsonrpc"
	// A2AREST is the body and query of an inbound A2A HTTP+JSON request.
	A2AREST = "a2a.rest"
	// A2AGRPC is the messages of an inbound A2A gRPC call.
	A2AGRPC = "a2a.grpc"
)

// Violation is one broken rule of one field.
type Violation struct {
	// Field is the path of the offending field ("" for the whole input).
	Field string `json:"field"`
	// Rule is the id of the broken rule, e.g. "string.min_len".
	Rule string `json:"rule"`
	// Message says what is wrong, for the caller to correct.
	Message string `json:"message"`
}

// String renders v as "field: message".
func (v Violation) String() string {
	if v.Field == "" {
		return v.Message
	}
	return v.Field + ": " + v.Message
}

// Summary joins violations into one readable message.
func Summary(vs []Violation) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = v.String()
	}
	return strings.Join(parts, "; ")
}

// maxLoggedFields is how many field paths a rejection event names.
const maxLoggedFields = 5

// maxDescription bounds the logged description.
const maxDescription = 300

// LogRejection writes the one boundary.validation_failed event for a rejected
// input. Field paths and messages are logged; values never are, and the
// description is scrubbed of secret-shaped text.
func LogRejection(ctx context.Context, log *slog.Logger, label string, vs []Violation) {
	fields := make([]string, 0, min(len(vs), maxLoggedFields))
	for i, v := range vs {
		if i == maxLoggedFields {
			break
		}
		// A field path can be caller-chosen (an unknown argument's name).
		fields = append(fields, logging.Scrub(v.Field))
	}
	desc := logging.Scrub(Summary(vs))
	if len(desc) > maxDescription {
		desc = desc[:maxDescription] + "…"
	}
	log.LogAttrs(ctx, slog.LevelWarn, "boundary.validation_failed",
		slog.String("boundary", label),
		slog.Int("error_count", len(vs)),
		slog.Any("fields", fields),
		slog.Bool("truncated", len(vs) > maxLoggedFields),
		slog.String("description", desc),
	)
}

// Validator checks messages against their protovalidate rules.
type Validator struct {
	v protovalidate.Validator
}

// NewValidator builds a validator. Rules are compiled lazily per message type
// and cached.
func NewValidator() (*Validator, error) {
	v, err := protovalidate.New()
	if err != nil {
		return nil, fmt.Errorf("build protovalidate validator: %w", err)
	}
	return &Validator{v: v}, nil
}

// Check validates msg. It returns the violations when msg breaks its rules,
// or an error when the rules themselves cannot be evaluated.
func (v *Validator) Check(msg proto.Message) ([]Violation, error) {
	verr, err := v.validate(msg)
	if verr == nil {
		return nil, err
	}
	return FromProtovalidate(verr), nil
}

// validate returns the validation error when msg breaks its rules, or err
// when the rules cannot be evaluated.
func (v *Validator) validate(msg proto.Message) (*protovalidate.ValidationError, error) {
	err := v.v.Validate(msg)
	if err == nil {
		return nil, nil
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		return nil, fmt.Errorf("evaluate validation rules: %w", err)
	}
	return verr, nil
}

// FromProtovalidate converts a protovalidate error into violations.
func FromProtovalidate(err *protovalidate.ValidationError) []Violation {
	vs := make([]Violation, 0, len(err.Violations))
	for _, pv := range err.Violations {
		vs = append(vs, fromProto(pv.Proto))
	}
	return vs
}

func fromProto(p *validate.Violation) Violation {
	return Violation{
		Field:   protovalidate.FieldPathString(p.GetField()),
		Rule:    p.GetRuleId(),
		Message: p.GetMessage(),
	}
}
