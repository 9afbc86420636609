// Package rpcerror is how the mesh answers errors its caller cannot act on.
// An unexpected error (a failed query, a bug, a broken dependency) is
// answered with a fixed message and an error id; the cause is logged under
// that id and never sent. The id travels as a google.rpc.ErrorInfo detail
// (domain "toolmesh", metadata "error_id") and in the message, so it reaches
// Connect, gRPC and REST callers alike, and the edge copies it into the tool
// result's envelope. docs/errors.md describes what callers see.
package rpcerror

import (
	"errors"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"

	"github.com/toolmesh/toolmesh/internal/ids"
)

// The fixed messages of errors answered with an id.
const (
	// MessageInternal answers any unexpected error.
	MessageInternal = "internal error"
	// MessageBusy answers a store that is busy or locked: the call did
	// nothing and may be retried.
	MessageBusy = "the service is busy; try again"
	// MessageUnreachable answers a service that could not be reached.
	MessageUnreachable = "the service could not be reached; try again"
)

const (
	errorDomain   = "toolmesh"
	reasonErrorID = "ERROR_ID"
	// MetadataErrorID is the ErrorInfo metadata key of the error id.
	MetadataErrorID = "error_id"
)

// NewID returns a fresh error id, "err_" and 26 characters that sort by
// time.
func NewID() string { return ids.New("err") }

// New returns the error answered for an error id: code, message followed by
// the id, and the id as a detail.
func New(code connect.Code, message, id string) *connect.Error {
	cerr := connect.NewError(code, errors.New(WithID(message, id)))
	if d, err := connect.NewErrorDetail(&errdetails.ErrorInfo{
		Reason:   reasonErrorID,
		Domain:   errorDomain,
		Metadata: map[string]string{MetadataErrorID: id},
	}); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// WithID is message followed by the error id, as callers read it.
func WithID(message, id string) string {
	return message + " (error id " + id + ")"
}

// ID returns the error id err carries as a detail ("" for none).
func ID(err error) string {
	var cerr *connect.Error
	if !errors.As(err, &cerr) {
		return ""
	}
	for _, d := range cerr.Details() {
		if d.Type() != "google.rpc.ErrorInfo" {
			continue
		}
		m, derr := d.Value()
		if derr != nil {
			continue
		}
		if info, ok := m.(*errdetails.ErrorInfo); ok && info.GetDomain() == errorDomain && info.GetReason() == reasonErrorID {
			return info.GetMetadata()[MetadataErrorID]
		}
	}
	return ""
}

// WithCause returns an error answered with code and message, a deliberate
// one the caller can act on ("could not start the ask; try again"), whose
// cause is logged under an error id rather than sent: the server's error
// interceptor adds the id. Use it where a dependency failed and the caller
// should know what did not happen.
func WithCause(code connect.Code, message string, cause error) *connect.Error {
	return connect.NewError(code, &causeError{message: message, cause: cause})
}

// Cause returns the cause of an error made with WithCause.
func Cause(err error) (error, bool) {
	var c *causeError
	if !errors.As(err, &c) {
		return nil, false
	}
	return c.cause, true
}

// causeError is a message with a hidden cause: Error is the message only.
type causeError struct {
	message string
	cause   error
}

func (e *causeError) Error() string { return e.message }
func (e *causeError) Unwrap() error { return e.cause }

// Public returns a message about err that is safe to show a caller: the
// message a service sent (services answer unexpected errors with fixed
// messages), or, for an error that never reached a service (a refused
// connection, a timeout), a fixed message for its code.
func Public(err error) string {
	var cerr *connect.Error
	if errors.As(err, &cerr) && connect.IsWireError(err) {
		return cerr.Message()
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable:
		return MessageUnreachable
	case connect.CodeDeadlineExceeded:
		return "the service did not answer in time"
	case connect.CodeCanceled:
		return "the call was cancelled"
	}
	return MessageInternal
}
