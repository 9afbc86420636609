package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/sqldb"

	"connectrpc.com/connect"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
)

// TestAnswerHidesWhatTheCallerCannotActOn classifies each kind of handler
// error: deliberate answers pass, anything else becomes a fixed message
// with an error id whose cause is logged.
func TestAnswerHidesWhatTheCallerCannotActOn(t *testing.T) {
	const cause = "read task: SQL logic error: no such table: tasks (1)"
	cases := []struct {
		name     string
		err      error
		code     connect.Code
		message  string // "" for the fixed message with an id
		loggedAs string // the cause the log holds, when one is logged
	}{
		{name: "plain error", err: errors.New(cause), code: connect.CodeInternal, loggedAs: cause},
		{name: "wrapped into Internal", err: connect.NewError(connect.CodeInternal, fmt.Errorf("get task: %w", errors.New(cause))),
			code: connect.CodeInternal, loggedAs: "get task: " + cause},
		{name: "Unknown", err: connect.NewError(connect.CodeUnknown, errors.New(cause)), code: connect.CodeInternal, loggedAs: cause},
		{name: "a downstream's answer", err: connect.NewWireError(connect.CodeInvalidArgument, errors.New("agent_id: value is required")),
			code: connect.CodeInternal, loggedAs: "agent_id: value is required"},
		{name: "busy store", err: connect.NewError(connect.CodeInternal, fmt.Errorf("create task: %w", &pgconn.PgError{Code: "40001", Message: "could not serialize access"})),
			code: connect.CodeUnavailable, loggedAs: "could not serialize access"},
		{name: "lock timeout", err: fmt.Errorf("update: %w", &pgconn.PgError{Code: "55P03", Message: "canceling statement due to lock timeout"}),
			code: connect.CodeUnavailable, loggedAs: "lock timeout"},
		{name: "constraint is not busy", err: fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23514", Message: "new row violates check constraint"}),
			code: connect.CodeInternal, loggedAs: "check constraint"},
		{name: "deliberate message with a hidden cause", err: rpcerror.WithCause(connect.CodeUnavailable, "could not start the ask; try again", errors.New("dial tcp 10.0.0.7:7233: connection refused")),
			code: connect.CodeUnavailable, message: "could not start the ask; try again", loggedAs: "10.0.0.7:7233"},
		{name: "not found", err: connect.NewError(connect.CodeNotFound, errors.New("task tsk_1 not found")), code: connect.CodeNotFound, message: "task tsk_1 not found"},
		{name: "invalid argument", err: connect.NewError(connect.CodeInvalidArgument, errors.New("webhook_url: host is private")), code: connect.CodeInvalidArgument, message: "webhook_url: host is private"},
		{name: "cancelled", err: fmt.Errorf("list tasks: %w", context.Canceled), code: connect.CodeCanceled, message: "the call was cancelled"},
		{name: "deadline", err: connect.NewError(connect.CodeInternal, fmt.Errorf("get task: %w", context.DeadlineExceeded)), code: connect.CodeDeadlineExceeded, message: "the call ran out of time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &logtest.Buffer{}
			got := answer(context.Background(), logging.New(logs, nil), sqldb.IsBusy, "/toolmesh.tasks.v1.TasksService/Get", c.err)
			var ce *connect.Error
			if !errors.As(got, &ce) || ce.Code() != c.code {
				t.Fatalf("answer = %v, want code %s", got, c.code)
			}
			id := rpcerror.ID(got)
			events := logs.Events("rpc.error")
			if c.loggedAs == "" {
				if id != "" || len(events) != 0 || ce.Message() != c.message {
					t.Fatalf("answer = %q (error id %q, %d events), want %q unchanged, nothing logged", ce.Message(), id, len(events), c.message)
				}
				return
			}
			want := c.message
			if want == "" {
				want = rpcerror.MessageInternal
				if c.code == connect.CodeUnavailable {
					want = rpcerror.MessageBusy
				}
			}
			if id == "" || ce.Message() != rpcerror.WithID(want, id) {
				t.Fatalf("answer message %q, error id %q; want %q and an id", ce.Message(), id, want)
			}
			if len(events) != 1 || events[0]["error_id"] != id || events[0]["code"] != c.code.String() ||
				!strings.Contains(fmt.Sprint(events[0]["error"]), c.loggedAs) {
				t.Errorf("logged %v, want one rpc.error under %s with code %s and a cause containing %q", events, id, c.code, c.loggedAs)
			}
		})
	}
}
