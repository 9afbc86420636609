package toolcall_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// TestFromErrorPassesOnlyWhatTheServiceChose: a service's deliberate
// message reaches the tool result, with its error id when it has one; the
// text of an error the service did not send is logged under a fresh id.
func TestFromErrorPassesOnlyWhatTheServiceChose(t *testing.T) {
	dial := fmt.Errorf("dial tcp 127.0.0.1:7104: connect: %w", errors.New("connection refused"))
	cases := []struct {
		name    string
		err     error
		code    string
		message string // "" for a fixed message with a fresh, logged id
		id      string // the service's id, when it sent one
	}{
		{name: "service internal with its id", err: wire(rpcerror.New(connect.CodeInternal, rpcerror.MessageInternal, "err_service")),
			code: toolcall.CodeInternal, message: rpcerror.WithID(rpcerror.MessageInternal, "err_service"), id: "err_service"},
		{name: "service busy with its id", err: wire(rpcerror.New(connect.CodeUnavailable, rpcerror.MessageBusy, "err_busy")),
			code: toolcall.CodeUnavailable, message: rpcerror.WithID(rpcerror.MessageBusy, "err_busy"), id: "err_busy"},
		{name: "service internal without an id", err: connect.NewWireError(connect.CodeInternal, errors.New("get task: SQL logic error")), code: toolcall.CodeInternal},
		{name: "service unknown", err: connect.NewWireError(connect.CodeUnknown, errors.New("read: /var/db/x.db")), code: toolcall.CodeInternal},
		{name: "service not found", err: connect.NewWireError(connect.CodeNotFound, errors.New("task tsk_1 not found")),
			code: toolcall.CodeNotFound, message: "task tsk_1 not found"},
		{name: "service unavailable", err: connect.NewWireError(connect.CodeUnavailable, errors.New("could not start the ask; try again")),
			code: toolcall.CodeUnavailable, message: "could not start the ask; try again"},
		{name: "unreachable service", err: connect.NewError(connect.CodeUnavailable, dial), code: toolcall.CodeUnavailable},
		{name: "protocol failure", err: connect.NewError(connect.CodeUnknown, errors.New("unexpected content-type text/html")), code: toolcall.CodeInternal},
		{name: "not a connect error", err: errors.New("encode: proto: invalid UTF-8"), code: toolcall.CodeInternal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logs := &logtest.Buffer{}
			env := toolcall.FromError(context.Background(), logging.New(logs, nil), "tasks_get", c.err)
			events := logs.Events("tool.error")
			if env.DomainCode != c.code {
				t.Fatalf("envelope %+v, want %s", env, c.code)
			}
			if c.message != "" {
				if env.Message != c.message || env.ErrorID != c.id || len(events) != 0 {
					t.Errorf("envelope %+v with %d tool.error events, want message %q, error id %q, nothing logged", env, len(events), c.message, c.id)
				}
				return
			}
			want := rpcerror.MessageInternal
			if c.code == toolcall.CodeUnavailable {
				want = rpcerror.MessageUnreachable
			}
			if env.ErrorID == "" || env.Message != rpcerror.WithID(want, env.ErrorID) {
				t.Fatalf("envelope %+v, want %q with a fresh error id", env, want)
			}
			if len(events) != 1 || events[0]["error_id"] != env.ErrorID || !strings.Contains(fmt.Sprint(events[0]["error"]), c.err.Error()) {
				t.Errorf("tool.error events %v, want one under %s holding %q", events, env.ErrorID, c.err)
			}
		})
	}
}

// wire is err as a client receives it from a service.
func wire(err *connect.Error) *connect.Error {
	out := connect.NewWireError(err.Code(), errors.New(err.Message()))
	for _, d := range err.Details() {
		out.AddDetail(d)
	}
	return out
}

// TestMarshalWritesWhatJSONMarshalWrites: the envelope's own encoding of a
// plain success gives json.Marshal's bytes — data with protojson's spaces
// compacted, HTML and line separators escaped — and every other envelope
// is json.Marshal's.
func TestMarshalWritesWhatJSONMarshalWrites(t *testing.T) {
	t.Parallel()
	envs := []*toolcall.Envelope{
		toolcall.OK(json.RawMessage(`{"id": "tsk_1", "title":"a <b> & c", "n": [1, 2]}`), nil),
		toolcall.OK(json.RawMessage("{\"text\":\"line\u2028sep\u2029 \\u003c\"}"), nil),
		toolcall.OK(json.RawMessage(` { } `), nil),
		toolcall.OK(nil, nil),
		toolcall.OK(json.RawMessage(`{"id":"x"}`), &toolcall.Pagination{Offset: 1, Limit: 2}),
		{Status: "ok", Data: json.RawMessage(`{"x":1}`), Notes: []string{"a note"}},
		{Status: "ok", Data: json.RawMessage(`{"x":1}`), Untrusted: []string{"x"}},
		{Status: "ok", Data: json.RawMessage(`{"x":1}`), Replayed: true, ReplayOf: "k"},
		toolcall.Fail("tasks_get", toolcall.CodeNotFound, "no task <x>"),
	}
	for _, env := range envs {
		want, wantErr := json.Marshal(env)
		got, err := toolcall.Marshal(env)
		if string(got) != string(want) || (err == nil) != (wantErr == nil) {
			t.Errorf("Marshal(%+v) = %s, %v; json.Marshal gives %s, %v", env, got, err, want, wantErr)
		}
	}
	bad := toolcall.OK(json.RawMessage(`{"x":`), nil)
	if _, err := toolcall.Marshal(bad); err == nil {
		t.Error("data that is not JSON was encoded")
	}
}
