package rpcerror_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
)

func TestIDTravelsAsADetail(t *testing.T) {
	id := rpcerror.NewID()
	if !regexp.MustCompile(`^err_[0-9a-z]{26}$`).MatchString(id) {
		t.Fatalf("NewID = %q, want err_ and 26 characters", id)
	}
	err := rpcerror.New(connect.CodeInternal, rpcerror.MessageInternal, id)
	if got := rpcerror.ID(fmt.Errorf("call: %w", err)); got != id {
		t.Errorf("ID = %q, want %q", got, id)
	}
	if err.Message() != "internal error (error id "+id+")" {
		t.Errorf("message %q, want the fixed message naming the id", err.Message())
	}
	gap := mesh.NewCapabilityGapError("x.y", errors.New("no channel"))
	for _, other := range []error{nil, errors.New("plain"), connect.NewError(connect.CodeInternal, errors.New("x")), gap} {
		if got := rpcerror.ID(other); got != "" {
			t.Errorf("ID(%v) = %q, want none", other, got)
		}
	}
}

func TestWithCauseSendsTheMessageAndKeepsTheCause(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.7:7233: connection refused")
	err := rpcerror.WithCause(connect.CodeUnavailable, "could not start the ask; try again", cause)
	if err.Message() != "could not start the ask; try again" {
		t.Errorf("message %q carries more than the chosen text", err.Message())
	}
	if got, ok := rpcerror.Cause(err); !ok || got != cause {
		t.Errorf("Cause = %v, %v; want the cause", got, ok)
	}
	if _, ok := rpcerror.Cause(connect.NewError(connect.CodeUnavailable, cause)); ok {
		t.Error("Cause found in an error made without WithCause")
	}
}

func TestPublicPassesOnlyWhatAServiceSent(t *testing.T) {
	cases := map[string]struct {
		err  error
		want string
	}{
		"service message": {connect.NewWireError(connect.CodeFailedPrecondition, errors.New("schedule s1 is paused")), "schedule s1 is paused"},
		"refused dial":    {connect.NewError(connect.CodeUnavailable, errors.New("dial tcp 127.0.0.1:7108: connection refused")), rpcerror.MessageUnreachable},
		"client timeout":  {connect.NewError(connect.CodeDeadlineExceeded, context.DeadlineExceeded), "the service did not answer in time"},
		"plain error":     {errors.New("read /var/db/x.db: permission denied"), rpcerror.MessageInternal},
	}
	for name, c := range cases {
		if got := rpcerror.Public(c.err); got != c.want {
			t.Errorf("%s: Public = %q, want %q", name, got, c.want)
		}
	}
}
