package calls_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// A call waiting for its next round when the workflow changes takes that
// round on the changed code and runs its side effect once, as long as the
// change is patched (docs/temporal-versioning.md). The run has been through two
// rounds (two updates) on the old code before the change.
func TestUpgradeInFlight(t *testing.T) {
	d := &devCall{t: t}
	workflowtest.Upgrade(t, dial(t), workflowtest.Case[*callsv1.ElicitedCallInput, *callsv1.RoundResult]{
		Workflow:   calls.Contract().Name,
		Code:       calls.ElicitedCall,
		Activities: d.registerActivities,
		Start: func(ctx context.Context, c client.Client, queue string) (client.WorkflowRun, error) {
			id := callID(t)
			run, first, err := startCall(ctx, c, queue, id, purgeInput(t))
			if err != nil {
				return nil, err
			}
			if first.GetRound() != 1 {
				return nil, fmt.Errorf("round 0 answered %v, want the question of round 1", first)
			}
			second, err := sendRound(ctx, c, id, run.GetRunID(), 1, map[string]*callsv1.Answer{"r1.fields": accept(t, map[string]any{"agent_id": "agent-9"})})
			if err != nil {
				return nil, err
			}
			if second.GetRound() != 2 {
				return nil, fmt.Errorf("round 1 answered %v, want the question of round 2", second)
			}
			return run, nil
		},
		Finish: func(ctx context.Context, c client.Client, run client.WorkflowRun) error {
			before := d.invokes.Load()
			final, err := sendRound(ctx, c, run.GetID(), run.GetRunID(), 2, map[string]*callsv1.Answer{"r2.admin": accept(t, map[string]any{"confirm": true, "reason": "cleanup"})})
			if err != nil {
				return err
			}
			var res callsv1.RoundResult
			if err := run.Get(ctx, &res); err != nil {
				return err
			}
			var env toolcall.Envelope
			if err := json.Unmarshal([]byte(final.GetEnvelope()), &env); err != nil || env.IsError() || res.GetCallId() != calls.IdempotencyKey(run.GetID()) {
				return fmt.Errorf("the final round answered %v and the call ended with %v, want the side effect's result under the call's key", final, &res)
			}
			if n := d.invokes.Load() - before; n != 1 {
				return fmt.Errorf("the side effect ran %d times, want once", n)
			}
			return nil
		},
	})
}
