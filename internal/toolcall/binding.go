package toolcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Binding is a tool bound to its backend service: built once at start and
// reused by every call. It decodes and validates arguments (the mcp.tool
// boundary) and calls the service with the caller's mesh identity.
type Binding struct {
	tool      *toolcatalog.Tool
	client    *connect.Client[message, message] // nil: no backend configured
	in        protoreflect.MessageDescriptor
	inType    protoreflect.MessageType
	validator *boundary.Validator
	log       *slog.Logger
	fieldList string
}

var (
	decodeOpts = protojson.UnmarshalOptions{}
	encodeOpts = protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true}
)

// NewBinding binds t to the service at baseURL ("" leaves it without a
// backend: calls answer not_supported). opts add to the client's options,
// e.g. telemetry.Providers.ClientOption, which makes each call a span of the
// caller's trace. The client mints each call's mesh token itself (Invoke),
// so that a caller's next call reuses it; its deadline is the call's own.
func NewBinding(t *toolcatalog.Tool, httpClient connect.HTTPClient, baseURL string, v *boundary.Validator, log *slog.Logger, opts ...connect.ClientOption) *Binding {
	b := &Binding{tool: t, in: t.Method.Input(), inType: messageType(t.Method.Input()), validator: v, log: log}
	b.fieldList = boundary.FieldNames(b.in)
	if baseURL != "" {
		out := messageType(t.Method.Output())
		b.client = connect.NewClient[message, message](
			meshclient.ForServices(httpClient), strings.TrimRight(baseURL, "/")+t.Procedure,
			connect.WithSchema(t.Method),
			// Inside the mesh, compressing small messages costs more CPU
			// than it saves bytes.
			connect.WithAcceptCompression("gzip", nil, nil),
			connect.WithResponseInitializer(func(_ connect.Spec, msg any) error {
				msg.(*message).Message = out.New().Interface()
				return nil
			}),
			connect.WithClientOptions(opts...),
		)
	}
	return b
}

// Decode parses tool arguments into the request message. It is the mcp.tool
// boundary: a rejection is logged once and returned as violations.
func (b *Binding) Decode(ctx context.Context, args json.RawMessage) (proto.Message, []boundary.Violation) {
	vs := CheckObject(args)
	if vs != nil {
		boundary.LogRejection(ctx, b.log, boundary.MCPTool, vs)
		return nil, vs
	}
	msg := b.inType.New().Interface()
	if err := decodeOpts.Unmarshal(objectOrEmpty(args), msg); err != nil {
		vs = []boundary.Violation{b.decodeFault(args, err)}
		boundary.LogRejection(ctx, b.log, boundary.MCPTool, vs)
		return nil, vs
	}
	vs, err := b.validator.Check(msg)
	if err != nil {
		vs = []boundary.Violation{{Rule: "validation.error", Message: err.Error()}}
	}
	if len(vs) > 0 {
		boundary.LogRejection(ctx, b.log, boundary.MCPTool, vs)
		return nil, vs
	}
	return msg, nil
}

// Violations decodes and validates arguments and returns what is wrong
// with them, without logging: the caller decides which violations are a
// rejection (a field the user will be asked for is not).
func (b *Binding) Violations(args json.RawMessage) []boundary.Violation {
	msg := b.inType.New().Interface()
	if err := decodeOpts.Unmarshal(objectOrEmpty(args), msg); err != nil {
		return []boundary.Violation{b.decodeFault(args, err)}
	}
	vs, err := b.validator.Check(msg)
	if err != nil {
		return []boundary.Violation{{Rule: "validation.error", Message: err.Error()}}
	}
	return vs
}

// TopField is the top-level field a violation's path starts with ("spec"
// for "spec.cron", "" for a message-level rule).
func TopField(path string) string {
	if i := strings.IndexAny(path, ".["); i >= 0 {
		return path[:i]
	}
	return path
}

// CheckObject rejects arguments that are not a JSON object (absent and null
// arguments count as the empty object).
func CheckObject(args json.RawMessage) []boundary.Violation {
	t := bytes.TrimSpace(args)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) || t[0] == '{' {
		return nil
	}
	return []boundary.Violation{{Rule: "arguments.object", Message: "arguments must be a JSON object"}}
}

func objectOrEmpty(args json.RawMessage) []byte {
	t := bytes.TrimSpace(args)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return []byte("{}")
	}
	return t
}

var (
	unknownFieldRE = regexp.MustCompile(`unknown field "([^"]*)"`)
	fieldRE        = regexp.MustCompile(`field ([A-Za-z0-9_.]+)`)
	protoPrefixRE  = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)
)

// decodeFault is the violation of arguments that protojson refused with
// err: located by its path when it can be (boundary.LocateJSONFault), else
// in err's own words.
func (b *Binding) decodeFault(args []byte, err error) boundary.Violation {
	if v, ok := boundary.LocateJSONFault(b.in, objectOrEmpty(args), "this tool"); ok {
		return v
	}
	return b.DecodeError(err)
}

// DecodeError turns a JSON or protojson error into one violation naming the
// field.
func (b *Binding) DecodeError(err error) boundary.Violation {
	msg := err.Error()
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		return boundary.Violation{Field: m[1], Rule: "unknown_field",
			Message: fmt.Sprintf("unknown field %q; this tool accepts: %s", m[1], b.fieldList)}
	}
	v := boundary.Violation{Rule: "type", Message: protoPrefixRE.ReplaceAllString(msg, "")}
	if m := fieldRE.FindStringSubmatch(msg); m != nil {
		v.Field = m[1]
	}
	if strings.Contains(msg, "syntax error") || strings.Contains(msg, "unexpected token") || strings.Contains(msg, "EOF") {
		v.Rule = "json.syntax"
	}
	return v
}

// Invoke calls the service with a decoded request and returns the envelope.
// The call is bounded by ctx's deadline: the caller's call timeout, carried
// with the call (the edge's, or the one an elicited call's workflow was
// given). The caller's mesh token is minted (or reused) with signer. The
// events a streaming tool reports are dropped (see InvokeWithEvents).
func (b *Binding) Invoke(ctx context.Context, msg proto.Message, signer *mesh.Signer, call mesh.Call) *Envelope {
	return b.InvokeWithEvents(ctx, msg, signer, call, nil)
}

// Events hears the events a streaming tool reports while it runs, in order;
// it must not keep ev.
type Events func(ev *toolv1.CallEvent)

// InvokeWithEvents is Invoke that hands each event a streaming tool reports
// to events (nil: dropped) before it returns the envelope of the result.
func (b *Binding) InvokeWithEvents(ctx context.Context, msg proto.Message, signer *mesh.Signer, call mesh.Call, events Events) *Envelope {
	name := b.tool.Name
	if b.client == nil {
		return Fail(name, CodeNotSupported, fmt.Sprintf("tool %s has no backend: service %s is not configured on this edge", name, b.tool.Service))
	}
	now := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = now.Add(unboundedTokenTTL)
	}
	// A token minted for this caller's earlier call is reused while it
	// expires no later than this call's deadline and stays valid for half
	// the time the call has.
	token, err := signer.MintFor(call.Caller, now, deadline, deadline.Sub(now)/2)
	if err != nil {
		return Unexpected(ctx, b.log, name, fmt.Errorf("mint mesh token: %w", err))
	}
	req := connect.NewRequest(&message{msg})
	mesh.SetHeaders(req.Header(), token, call.IdempotencyKey)
	if b.tool.EventField != nil {
		out, header, err := b.stream(ctx, req, events)
		if err != nil {
			return FromError(ctx, b.log, name, err)
		}
		return b.envelope(ctx, out, header)
	}
	res, err := b.client.CallUnary(ctx, req)
	if err != nil {
		return FromError(ctx, b.log, name, err)
	}
	return b.envelope(ctx, res.Msg.Message, res.Header())
}

// stream calls a streaming tool: every message that carries an event is
// handed to events, and the last one that does not is the result.
func (b *Binding) stream(ctx context.Context, req *connect.Request[message], events Events) (proto.Message, http.Header, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := b.client.CallServerStream(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	defer st.Close()
	var result proto.Message
	ef := b.tool.EventField
	for st.Receive() {
		m := st.Msg().Message
		if pr := m.ProtoReflect(); pr.Has(ef) {
			if events != nil {
				if ev, ok := pr.Get(ef).Message().Interface().(*toolv1.CallEvent); ok {
					events(ev)
				}
			}
			continue
		}
		result = m
	}
	if err := st.Err(); err != nil {
		return nil, nil, err
	}
	if result == nil {
		return nil, nil, connect.NewError(connect.CodeInternal, errors.New("the stream ended without a result"))
	}
	return result, st.ResponseHeader(), nil
}

// envelope is the success envelope of a response.
func (b *Binding) envelope(ctx context.Context, msg proto.Message, header http.Header) *Envelope {
	name := b.tool.Name
	out := msg.ProtoReflect()
	var page *Pagination
	if pf := b.tool.PageField; pf != nil && out.Has(pf) {
		page = readPage(out.Get(pf).Message())
		out.Clear(pf)
	}
	var untrusted []string
	if len(b.tool.Untrusted) > 0 {
		if untrusted = b.screen(ctx, out); untrusted == nil {
			return Unexpected(ctx, b.log, name, errors.New("the secret scanner could not be built"))
		}
	}
	data, err := encodeOpts.Marshal(msg)
	if err != nil {
		return Unexpected(ctx, b.log, name, fmt.Errorf("encode response: %w", err))
	}
	env := OK(data, page)
	env.encoded = env.Data
	env.Untrusted = untrusted
	env.ReplayOf, env.Replayed = idempotency.ReplayOf(header)
	return env
}

// unboundedTokenTTL is how long the token of a call without a deadline
// lives.
const unboundedTokenTTL = time.Minute

// Tool is the bound tool.
func (b *Binding) Tool() *toolcatalog.Tool { return b.tool }

// HasBackend reports whether a service is configured for the tool.
func (b *Binding) HasBackend() bool { return b.client != nil }

// Input is the request message type.
func (b *Binding) Input() protoreflect.MessageDescriptor { return b.in }

func readPage(m protoreflect.Message) *Pagination {
	f := m.Descriptor().Fields()
	p := &Pagination{
		Offset: int32(m.Get(f.ByName("offset")).Int()),
		Limit:  int32(m.Get(f.ByName("limit")).Int()),
		Total:  int32(m.Get(f.ByName("total")).Int()),
	}
	if nf := f.ByName("next_offset"); m.Has(nf) {
		n := int32(m.Get(nf).Int())
		p.NextOffset = &n
	}
	return p
}
