package owner

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// Engine runs asks as workflows of the owner.ask contract
// (AskWorkflowInput). TemporalEngine implements it with a Temporal
// client; the service's tests use an in-memory stand-in.
type Engine interface {
	// StartAsk starts the ask's workflow unless one with its id exists,
	// running or ended; then it does nothing.
	StartAsk(ctx context.Context, in *ownerv1.AskWorkflowInput) error
	// WaitAsk blocks until the workflow ends and returns its outcome (a
	// cancelled workflow's outcome has status ASK_STATUS_CANCELLED), or
	// until ctx ends. It watches the workflow's result: it returns as soon
	// as the workflow ends, not on a timer.
	WaitAsk(ctx context.Context, workflowID string) (*ownerv1.AskOutcome, error)
	// AnswerAsk delivers u as the answer update (idempotent per updateID)
	// and, once the workflow took it, returns the outcome: an
	// *AnswerRejectedError when the workflow's validator refuses it,
	// ErrNoWorkflow when the workflow has ended.
	AnswerAsk(ctx context.Context, workflowID, updateID string, u *ownerv1.AnswerUpdate) (*ownerv1.AskOutcome, error)
	// ExtendAsk delivers u as the extend update (idempotent per updateID)
	// and returns the expire time the workflow keeps once it took it: an
	// *AnswerRejectedError when the workflow's validator refuses it,
	// ErrNoWorkflow when the workflow has ended.
	ExtendAsk(ctx context.Context, workflowID, updateID string, u *ownerv1.ExtendUpdate) (time.Time, error)
	// CancelAsk asks the workflow to cancel; a workflow that has ended is
	// left alone.
	CancelAsk(ctx context.Context, workflowID string) error
	// QueryAsk asks the running workflow where the ask is (the status
	// query); the outcome has status ASK_STATUS_PENDING while it waits.
	QueryAsk(ctx context.Context, workflowID string) (*ownerv1.AskOutcome, error)
}

// ErrNoWorkflow reports that an ask's workflow does not exist or has ended.
var ErrNoWorkflow = errors.New("the ask's workflow has ended or does not exist")

// AnswerRejectedError is the answer or extend update's validator refusing
// it; the workflow's history is unchanged.
type AnswerRejectedError struct {
	Reason  ownerv1.AskRejection
	Message string
}

func (e *AnswerRejectedError) Error() string { return e.Message }

// askWorkflow is the ask workflow's contract.
func askWorkflow() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&ownerv1.AskWorkflowInput{})
}

// WorkflowID is the id of an ask's workflow, "ask/<agent>/<ask id>". It is
// also the ask's MCP task id.
func WorkflowID(agent, askID string) string {
	return askWorkflow().IDPrefix + "/" + agent + "/" + askID
}

// ParseWorkflowID splits an ask workflow id into the agent and the ask id.
func ParseWorkflowID(id string) (agent, askID string, ok bool) {
	rest, ok := strings.CutPrefix(id, askWorkflow().IDPrefix+"/")
	if !ok {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}
