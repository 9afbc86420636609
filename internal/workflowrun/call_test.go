package workflowrun_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
)

func testCall(logs *logtest.Buffer) workflowrun.Call {
	return workflowrun.Call{Event: "owner.ask", What: "ask", IDKey: "ask_id", ID: "ask_1", Log: slog.New(slog.NewJSONHandler(logs, nil))}
}

func TestStartRollsBackWhatItCreated(t *testing.T) {
	down := errors.New("temporal is down")
	for _, tc := range []struct {
		name       string
		created    bool
		start      error
		removeErr  error
		wantRemove bool
		wantEvent  bool
	}{
		{name: "started", created: true},
		{name: "a first attempt's row is removed", created: true, start: down, wantRemove: true},
		{name: "a retry leaves the first attempt's row", created: false, start: down},
		{name: "a failed removal is logged", created: true, start: down, removeErr: errors.New("disk full"), wantRemove: true, wantEvent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs logtest.Buffer
			removed := false
			err := testCall(&logs).Start(t.Context(), tc.created,
				func(context.Context) error { return tc.start },
				func(ctx context.Context) error {
					removed = true
					if ctx.Err() != nil {
						t.Error("remove ran under a cancelled context")
					}
					return tc.removeErr
				})
			if removed != tc.wantRemove {
				t.Errorf("row removed: %v, want %v", removed, tc.wantRemove)
			}
			if tc.start == nil {
				if err != nil {
					t.Errorf("Start = %v, want nil", err)
				}
				return
			}
			if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "could not start the ask; try again") {
				t.Errorf("Start = %v, want unavailable: could not start the ask; try again", err)
			}
			if got := len(logs.Events("owner.ask_rollback_failed")); (got == 1) != tc.wantEvent {
				t.Errorf("%d owner.ask_rollback_failed events, want event %v", got, tc.wantEvent)
			}
		})
	}
}

func TestAwait(t *testing.T) {
	ended := func(_ context.Context, row string, o string) string { return row + " " + o }
	answers := func(context.Context) (string, error) { return "answered", nil }
	blocks := func(ctx context.Context) (string, error) { <-ctx.Done(); return "", ctx.Err() }
	fails := func(context.Context) (string, error) { return "", errors.New("temporal is down") }

	var logs logtest.Buffer
	c := testCall(&logs)
	if got := workflowrun.Await(t.Context(), c, "ask", time.Second, answers, ended); got != "ask answered" {
		t.Errorf("an outcome within the budget: %q, want the row as it ended", got)
	}
	if got := workflowrun.Await(t.Context(), c, "ask", 10*time.Millisecond, blocks, ended); got != "ask" {
		t.Errorf("a budget that runs out: %q, want the row as it stands", got)
	}
	if n := len(logs.Events("owner.ask_wait_failed")); n != 0 {
		t.Errorf("%d owner.ask_wait_failed events before any failure", n)
	}
	if got := workflowrun.Await(t.Context(), c, "ask", time.Second, fails, ended); got != "ask" {
		t.Errorf("a failing wait: %q, want the row as it stands", got)
	}
	if ev := logs.Events("owner.ask_wait_failed"); len(ev) != 1 || ev[0]["ask_id"] != "ask_1" {
		t.Errorf("owner.ask_wait_failed events %v, want one naming ask_1", ev)
	}
}

func TestWaitBudget(t *testing.T) {
	five := int32(5)
	zero := int32(0)
	for _, tc := range []struct {
		seconds *int32
		want    time.Duration
	}{{nil, 25 * time.Second}, {&five, 5 * time.Second}, {&zero, 0}} {
		if got := workflowrun.WaitBudget(tc.seconds, 25*time.Second); got != tc.want {
			t.Errorf("WaitBudget(%v) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}
