package boundary

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
)

// NewRequestInterceptor returns the service-side interceptor that validates
// every request message against its protovalidate rules before the handler
// runs. A bad request is InvalidArgument carrying the violations as a
// buf.validate.Violations error detail, and is logged at the grpc.request
// boundary.
func NewRequestInterceptor(v *Validator, log *slog.Logger) connect.Interceptor {
	return &requestInterceptor{v: v, log: log}
}

type requestInterceptor struct {
	v   *Validator
	log *slog.Logger
}

func (i *requestInterceptor) check(ctx context.Context, msg any) error {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil
	}
	verr, err := i.v.validate(m)
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if verr == nil {
		return nil
	}
	vs := FromProtovalidate(verr)
	LogRejection(ctx, i.log, GRPCRequest, vs)
	cerr := connect.NewError(connect.CodeInvalidArgument, errors.New(Summary(vs)))
	if d, err := connect.NewErrorDetail(verr.ToProto()); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// InvalidArgument is the InvalidArgument error of a request a handler
// refuses for reasons only it can check (a tool's arguments, a graph),
// carrying violations the way the request interceptor does, so the edge
// lists them field by field.
func InvalidArgument(vs ...Violation) *connect.Error {
	cerr := connect.NewError(connect.CodeInvalidArgument, errors.New(Summary(vs)))
	pv := make([]*validate.Violation, 0, len(vs))
	for _, v := range vs {
		var elems []*validate.FieldPathElement
		if v.Field != "" {
			for _, name := range strings.Split(v.Field, ".") {
				elems = append(elems, validate.FieldPathElement_builder{FieldName: proto.String(name)}.Build())
			}
		}
		pv = append(pv, validate.Violation_builder{
			Field:   validate.FieldPath_builder{Elements: elems}.Build(),
			RuleId:  proto.String(v.Rule),
			Message: proto.String(v.Message),
		}.Build())
	}
	if d, err := connect.NewErrorDetail(validate.Violations_builder{Violations: pv}.Build()); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// ViolationsFromError reads the violations a service attached to an
// InvalidArgument error; nil when there are none.
func ViolationsFromError(err *connect.Error) []Violation {
	var out []Violation
	for _, d := range err.Details() {
		m, derr := d.Value()
		if derr != nil {
			continue
		}
		if vs, ok := m.(*validate.Violations); ok {
			for _, v := range vs.GetViolations() {
				out = append(out, fromProto(v))
			}
		}
	}
	return out
}

func (i *requestInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if !req.Spec().IsClient {
			if err := i.check(ctx, req.Any()); err != nil {
				return nil, err
			}
		}
		return next(ctx, req)
	}
}

func (i *requestInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *requestInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		return next(ctx, &validatingConn{StreamingHandlerConn: conn, ctx: ctx, i: i})
	}
}

type validatingConn struct {
	connect.StreamingHandlerConn
	ctx context.Context
	i   *requestInterceptor
}

func (c *validatingConn) Receive(msg any) error {
	if err := c.StreamingHandlerConn.Receive(msg); err != nil {
		return err
	}
	return c.i.check(c.ctx, msg)
}
