package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
)

// newErrorInterceptor is the one place where a service's errors become
// answers. A panic answers one request instead of killing the process.
// Errors a handler chose for the caller (NotFound, InvalidArgument, ...)
// pass unchanged. Anything else — an error without a code, Internal or
// Unknown, an error a downstream service sent — is unexpected: the caller
// gets a fixed message and an error id, and the cause is logged under that
// id. An error busy reports (a busy or locked database) is Unavailable,
// which the caller may retry.
func newErrorInterceptor(log *slog.Logger, busy func(error) bool) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (res connect.AnyResponse, err error) {
			defer func() {
				if r := recover(); r != nil {
					id := rpcerror.NewID()
					log.ErrorContext(ctx, "rpc.error", "error_id", id, "procedure", req.Spec().Procedure,
						"code", connect.CodeInternal.String(), "error", fmt.Sprintf("panic: %v", r), "stack", string(debug.Stack()))
					res, err = nil, rpcerror.New(connect.CodeInternal, rpcerror.MessageInternal, id)
				}
			}()
			res, err = next(ctx, req)
			if err != nil {
				err = answer(ctx, log, busy, req.Spec().Procedure, err)
			}
			return res, err
		}
	})
}

// answer is the error the caller of procedure gets for err; busy (nil:
// none is) tells a transient failure of the service's store.
func answer(ctx context.Context, log *slog.Logger, busy func(error) bool, procedure string, err error) error {
	var cerr *connect.Error
	isConnect := errors.As(err, &cerr)
	if cause, ok := rpcerror.Cause(err); ok && isConnect {
		// A deliberate message with a cause that stays here.
		id := rpcerror.NewID()
		logCause(ctx, log, procedure, id, cerr.Code(), cause)
		return rpcerror.New(cerr.Code(), cerr.Message(), id)
	}
	if isConnect && !connect.IsWireError(err) {
		switch cerr.Code() {
		case connect.CodeInternal, connect.CodeUnknown:
		default:
			return err
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, errors.New("the call was cancelled"))
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, errors.New("the call ran out of time"))
	}
	id := rpcerror.NewID()
	if busy != nil && busy(err) {
		logCause(ctx, log, procedure, id, connect.CodeUnavailable, err)
		return rpcerror.New(connect.CodeUnavailable, rpcerror.MessageBusy, id)
	}
	logCause(ctx, log, procedure, id, connect.CodeInternal, err)
	return rpcerror.New(connect.CodeInternal, rpcerror.MessageInternal, id)
}

// logCause logs the cause of an answer with an error id: one rpc.error
// event, at error level for an internal error and warning otherwise.
func logCause(ctx context.Context, log *slog.Logger, procedure, id string, code connect.Code, cause error) {
	level := slog.LevelWarn
	if code == connect.CodeInternal {
		level = slog.LevelError
	}
	log.Log(ctx, level, "rpc.error", "error_id", id, "procedure", procedure, "code", code.String(), "error", cause)
}
