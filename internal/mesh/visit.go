package mesh

import (
	"errors"
	"fmt"

	"buf.build/go/protovalidate"
	"connectrpc.com/connect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// NewVisitRequiredError is a service's answer to a call it cannot make until
// the person behind the call visits v.Url (toolmesh.tool.v1.VisitRequired):
// FailedPrecondition with the message as its text and v as a detail. The
// service returns it before any side effect; the edge asks the person to
// visit and calls again with the same request and idempotency key. It
// refuses a v that breaks the contract's rules (a URL that is not https or
// loopback http, a blank message, a malformed visit id): that is the
// service's bug, returned as an internal error.
func NewVisitRequiredError(v *toolv1.VisitRequired) *connect.Error {
	if err := protovalidate.Validate(v); err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("visit required: %w", err))
	}
	cerr := connect.NewError(connect.CodeFailedPrecondition, errors.New(v.GetMessage()))
	d, err := connect.NewErrorDetail(v)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("visit required: %w", err))
	}
	cerr.AddDetail(d)
	return cerr
}

// VisitRequired reads the visit a service asked for with
// NewVisitRequiredError: (nil, nil) when err carries none, and an error
// when the detail it carries breaks the contract's rules (the edge never
// sends a person to such a URL).
func VisitRequired(err error) (*toolv1.VisitRequired, error) {
	var cerr *connect.Error
	if !errors.As(err, &cerr) || cerr.Code() != connect.CodeFailedPrecondition {
		return nil, nil
	}
	for _, d := range cerr.Details() {
		m, derr := d.Value()
		if derr != nil {
			continue
		}
		if v, ok := m.(*toolv1.VisitRequired); ok {
			if verr := protovalidate.Validate(v); verr != nil {
				return nil, fmt.Errorf("a VisitRequired detail that breaks its rules: %w", verr)
			}
			return v, nil
		}
	}
	return nil, nil
}
