package server

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"

	"connectrpc.com/connect"
)

// newRecoverInterceptor turns a handler panic into an Internal error so that a
// bug answers one request with an error instead of killing the process.
func newRecoverInterceptor(log *slog.Logger) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (res connect.AnyResponse, err error) {
			defer func() {
				if r := recover(); r != nil {
					log.ErrorContext(ctx, "rpc.panic", "procedure", req.Spec().Procedure, "panic", r, "stack", string(debug.Stack()))
					res, err = nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
				}
			}()
			return next(ctx, req)
		}
	})
}
