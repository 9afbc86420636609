package elicit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// The Temporal side of elicitation: the call's workflow is started with
// its first round (update-with-start) and each later round is an update of
// the same run (see elicit.go for the protocol side).

// callRun addresses the workflow run that carries an elicited call.
type callRun struct {
	id, runID string
}

// roundUpdate is what one round delivers to a call's workflow run: the
// answers to the questions of round, for arguments of digest.
type roundUpdate struct {
	run     callRun
	round   int32
	digest  string
	answers map[string]*callsv1.Answer
	// acceptOnly: wait until the workflow accepted the update, not for
	// its outcome (which is then nil).
	acceptOnly bool
}

// workflowID is the id of a call's workflow: derived from the caller, the
// tool, the arguments and the client's idempotency key when it gave one (a
// repeated call reaches the same workflow), else random.
func (x *Elicitor) workflowID(c *call, clientKey string) string {
	tool := c.t.Name
	var suffix string
	if clientKey != "" {
		h := sha256.New()
		for _, s := range []string{c.p.Subject, c.p.Agent, tool, c.digest, clientKey} {
			fmt.Fprintf(h, "%d:%s;", len(s), s)
		}
		suffix = hex.EncodeToString(h.Sum(nil)[:16])
	} else {
		var r [16]byte
		_, _ = rand.Read(r[:])
		suffix = hex.EncodeToString(r[:])
	}
	return x.wf.IDPrefix + "/" + tool + "/" + suffix
}

// startWorkflow starts the call's workflow and delivers round 0 in one
// round trip (update-with-start; a running workflow of the same id is
// reused, and the update id makes a repeated start idempotent).
func (x *Elicitor) startWorkflow(ctx context.Context, id string, in *callsv1.ElicitedCallInput, p *identity.Principal) (*callsv1.RoundResult, string, error) {
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	keyword := temporal.NewSearchAttributeKeyKeyword
	// A backstop: the workflow gives a call up after one unanswered round
	// by itself, and a task at its deadline, which its agent may extend up
	// to the task's longest life.
	backstop := time.Duration(x.max+2) * x.patience
	if in.GetTask() {
		backstop += toolcall.MaxTaskLifetime
	}
	op := x.tc.NewWithStartWorkflowOperation(client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                x.wf.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionTimeout: backstop,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			keyword(workflowcontract.SearchAttrAgent).ValueSet(p.Agent),
			keyword(workflowcontract.SearchAttrTool).ValueSet(in.GetTool()),
			keyword(workflowcontract.SearchAttrKind).ValueSet(x.wf.IDPrefix),
			keyword(workflowcontract.SearchAttrStatus).ValueSet("waiting"),
		),
		StaticSummary: fmt.Sprintf("%s for agent %s (subject %s): asks the user before it runs", in.GetTool(), p.Agent, p.Subject),
		StaticDetails: x.wf.Summary,
		// The agent is the fairness key of the call's tasks: one agent's
		// many calls take turns with other agents' (internal/workflowrun).
		Priority: temporal.Priority{FairnessKey: p.Agent},
	}, x.wf.Name, in)
	h, err := x.tc.UpdateWithStartWorkflow(ctx, client.UpdateWithStartWorkflowOptions{
		StartWorkflowOperation: op,
		UpdateOptions: client.UpdateWorkflowOptions{
			UpdateID:     id + "/1",
			UpdateName:   x.round.Name,
			Args:         []any{&callsv1.RoundRequest{Round: 0, ArgumentsDigest: in.GetArgumentsDigest()}},
			WaitForStage: client.WorkflowUpdateStageCompleted,
		},
	})
	if err != nil {
		return nil, "", err
	}
	var res callsv1.RoundResult
	if err := h.Get(ctx, &res); err != nil {
		return nil, "", err
	}
	run, err := op.Get(ctx)
	if err != nil {
		return nil, "", err
	}
	return &res, run.GetRunID(), nil
}

// update delivers the answers to a round of c to its workflow run, telling
// a client that asked for progress that the call is still running
// meanwhile.
func (x *Elicitor) update(ctx context.Context, c *call, run callRun, round int32, answers map[string]*callsv1.Answer) (*callsv1.RoundResult, error) {
	if c.Progress != nil {
		defer c.Progress.Start(ctx, c.t)()
	}
	return x.updateWorkflow(ctx, roundUpdate{run: run, round: round, digest: c.digest, answers: answers})
}

// cancelCall delivers u, the cancellation of the pending question, so a
// call whose client left ends now (and the service hears of a visit it
// asked for ending with it), not when its round is abandoned. It waits
// only until the workflow has accepted the update, not for the call's end
// (which runs what the call's end tells its service), within the round
// budget; best effort beyond that.
func (x *Elicitor) cancelCall(u roundUpdate) {
	u.acceptOnly = true
	_, err := x.updateWorkflow(context.Background(), u)
	if err != nil && !refused(err) {
		x.log.Warn("mcp.elicitation.cancel_not_delivered", "workflow_id", u.run.id, "round", u.round, "error", err)
	}
}

// updateWorkflow sends the round update and waits for its outcome, at most
// x.wait. Its id is derived from the round and what it delivers: the same
// round with the same answers sent again — a client's retry after an
// unavailable answer, or a concurrent duplicate — attaches to the first
// update and gets its outcome, so the side effect happens once; the same
// round with other answers is refused by the workflow's validator (or,
// once the call is over, by Temporal).
func (x *Elicitor) updateWorkflow(ctx context.Context, u roundUpdate) (*callsv1.RoundResult, error) {
	ctx, cancel := context.WithTimeout(ctx, x.wait)
	defer cancel()
	req := &callsv1.RoundRequest{Round: u.round, ArgumentsDigest: u.digest, Answers: u.answers}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode round %d: %w", u.round, err)
	}
	sum := sha256.Sum256(b)
	stage := client.WorkflowUpdateStageCompleted
	if u.acceptOnly {
		stage = client.WorkflowUpdateStageAccepted
	}
	h, err := x.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   u.run.id,
		RunID:        u.run.runID,
		UpdateID:     fmt.Sprintf("%s/%d/%s", u.run.id, u.round+1, hex.EncodeToString(sum[:16])),
		UpdateName:   x.round.Name,
		Args:         []any{req},
		WaitForStage: stage,
	})
	if err != nil || u.acceptOnly {
		return nil, err
	}
	var res callsv1.RoundResult
	if err := h.Get(ctx, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// refused reports whether a round's error means the round was refused
// (stale, repeated, or the call is gone) rather than that Temporal could
// not be reached in time.
func refused(err error) bool {
	var (
		notFound *serviceerror.NotFound
		invalid  *serviceerror.InvalidArgument
		failed   *serviceerror.FailedPrecondition
		app      *temporal.ApplicationError
	)
	return errors.As(err, &notFound) || errors.As(err, &invalid) || errors.As(err, &failed) || errors.As(err, &app)
}

// resume continues a call made before with the same idempotency key (and
// so the same workflow id): a running call gets its pending question again
// (or its task), a finished one its result. ok is false when there is no
// such call.
func (x *Elicitor) resume(ctx context.Context, c *call, id string) (port.Outcome, bool) {
	t := c.t
	qctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	desc, err := x.tc.DescribeWorkflow(qctx, id, "")
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return port.Outcome{}, false
	case err != nil:
		return port.Outcome{Envelope: x.unavailable(ctx, t.Name, id, err)}, true
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return port.Outcome{Envelope: x.finished(ctx, t.Name, id)}, true
	}
	runID := info.GetExecution().GetRunId()
	v, err := x.tc.QueryWorkflow(qctx, id, runID, x.pending.Name)
	if err != nil {
		return port.Outcome{Envelope: x.unavailable(ctx, t.Name, id, err)}, true
	}
	var res callsv1.RoundResult
	if err := v.Get(&res); err != nil || (res.GetEnvelope() == "" && len(res.GetQuestions()) == 0 && !res.GetTask()) {
		// Not asked its first question yet: start it (the start is
		// idempotent) as if it were new.
		return port.Outcome{}, false
	}
	return x.respond(ctx, c, callRun{id: id, runID: runID}, &res), true
}

// finished answers a repeated call (same idempotency key) that is over
// with its result; a call that was abandoned or cancelled has none.
func (x *Elicitor) finished(ctx context.Context, tool, id string) *toolcall.Envelope {
	var res callsv1.RoundResult
	wctx, cancel := context.WithTimeout(ctx, x.wait)
	defer cancel()
	err := x.tc.GetWorkflow(wctx, id, "").Get(wctx, &res)
	if wctx.Err() != nil {
		return x.unavailable(ctx, tool, id, err)
	}
	if err != nil || res.GetEnvelope() == "" {
		return toolcall.Fail(tool, toolcall.CodeConflict,
			"a call with this idempotency key ended without a result (it was abandoned or cancelled); call again with a new key")
	}
	var env toolcall.Envelope
	if err := json.Unmarshal([]byte(res.GetEnvelope()), &env); err != nil || env.Status == "" {
		return toolcall.Unexpected(ctx, x.log, tool, errors.New("the call's workflow returned no result envelope"))
	}
	return &env
}
