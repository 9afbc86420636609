package toolcall

import (
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
)

// RateLimited returns the ResourceExhausted error a service answers when
// something it depends on (an outside API) limits its rate. A positive
// after travels as a google.rpc.RetryInfo detail, which the edge reports as
// the envelope's retry_after_seconds.
func RateLimited(err error, after time.Duration) *connect.Error {
	return WithRetryAfter(connect.NewError(connect.CodeResourceExhausted, err), after)
}

// WithRetryAfter adds a google.rpc.RetryInfo detail saying when to try
// again (nothing when after is not positive) and returns cerr.
func WithRetryAfter(cerr *connect.Error, after time.Duration) *connect.Error {
	if after <= 0 {
		return cerr
	}
	if d, err := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(after)}); err == nil {
		cerr.AddDetail(d)
	}
	return cerr
}

// retryAfterSeconds reads the RetryInfo detail of cerr, rounded up to
// whole seconds; 0 when there is none.
func retryAfterSeconds(cerr *connect.Error) int {
	for _, d := range cerr.Details() {
		m, err := d.Value()
		if err != nil {
			continue
		}
		if info, ok := m.(*errdetails.RetryInfo); ok && info.GetRetryDelay().AsDuration() > 0 {
			return int(math.Ceil(info.GetRetryDelay().AsDuration().Seconds()))
		}
	}
	return 0
}
