package elicit

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
)

// MCP tasks carried by the calls worker (port.Tasks). The task id is the
// workflow id; everything about the task is read from Temporal: the
// workflow's status and search attributes (ToolmeshAgent binds it to its
// caller's agent, ToolmeshKind says it is a task), its task query while it
// runs, its result once it is over. Nothing is kept here, so any edge
// replica serves any task.

// tasks follows the calls that are MCP tasks (port.Tasks, Elicitor.Tasks);
// it holds only what that takes.
type tasks struct {
	log    *slog.Logger
	tc     client.Client
	prefix string // the id prefix of the calls workflows
	answer workflowcontract.Handler
	view   workflowcontract.Handler
	extend workflowcontract.Handler
	// wait bounds an answer, which may run the call's side effect;
	// startWait every other request.
	wait, startWait time.Duration
	// namespace is the Temporal namespace, whose retention (read once) is
	// how long a task is kept at least.
	namespace string
	retention atomic.Pointer[time.Duration]
}

// kindTask is the ToolmeshKind of a calls workflow that is a task (the
// worker's, by contract: workers/calls).
const kindTask = "task"

// errAbandoned is the failure type of a call nobody answered in time.
const errAbandoned = "Abandoned"

// Owns reports whether id is a calls workflow's id.
func (x *tasks) Owns(id string) bool { return strings.HasPrefix(id, x.prefix+"/") }

// created is the task a call became in the round that answered res.
func (x *tasks) created(ctx context.Context, id string, res *callsv1.RoundResult) *port.Task {
	now := time.Now().UTC()
	t := &port.Task{ID: id, Status: port.TaskWorking, Created: now, Updated: now, TTL: x.taskTTL(ctx)}
	if qs := res.GetQuestions(); len(qs) > 0 {
		t.Status = port.TaskInputRequired
		t.Questions = taskQuestions(qs)
	}
	return t
}

func taskQuestions(qs []*callsv1.Question) []port.Question {
	out := make([]port.Question, 0, len(qs))
	for _, q := range qs {
		out = append(out, question(q))
	}
	return out
}

// taskTTL is how long a task is kept at least: the namespace's retention
// after it ends, so at least that long from its creation. Nil when
// Temporal has not said yet.
func (x *tasks) taskTTL(ctx context.Context) *time.Duration {
	if d := x.retention.Load(); d != nil {
		return d
	}
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	ns, err := x.tc.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: x.namespace})
	if err != nil || ns.GetConfig().GetWorkflowExecutionRetentionTtl() == nil {
		return nil
	}
	d := ns.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration()
	x.retention.Store(&d)
	return &d
}

// describeTask describes the workflow of task id as p's: not found unless
// it is a task of p's agent.
func (x *tasks) describeTask(ctx context.Context, p *identity.Principal, id string) (*client.WorkflowExecutionDescription, error) {
	if p == nil || !x.Owns(id) {
		return nil, port.ErrTaskNotFound
	}
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	desc, err := x.tc.DescribeWorkflow(ctx, id, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return nil, port.ErrTaskNotFound
	}
	if err != nil {
		return nil, err
	}
	kind, _ := desc.TypedSearchAttributes.GetKeyword(temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrKind))
	agent, _ := desc.TypedSearchAttributes.GetKeyword(temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrAgent))
	if kind != kindTask || agent != p.Agent {
		return nil, port.ErrTaskNotFound
	}
	return desc, nil
}

// Get shows task id: while its workflow runs, what its task query says;
// once it is over, its result.
func (x *tasks) Get(ctx context.Context, p *identity.Principal, id string) (*port.Task, error) {
	desc, err := x.describeTask(ctx, p, id)
	if err != nil {
		return nil, err
	}
	t := &port.Task{ID: id, Created: desc.WorkflowStartTime.UTC(), TTL: x.taskTTL(ctx)}
	runID := desc.WorkflowExecution.RunID
	if desc.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		qctx, cancel := context.WithTimeout(ctx, x.startWait)
		defer cancel()
		v, err := x.tc.QueryWorkflow(qctx, id, runID, x.view.Name)
		if err != nil {
			return nil, fmt.Errorf("query task %s: %w", id, err)
		}
		var view callsv1.TaskView
		if err := v.Get(&view); err != nil {
			return nil, fmt.Errorf("read task %s: %w", id, err)
		}
		t.Status, t.Message, t.Updated = port.TaskWorking, view.GetMessage(), view.GetUpdateTime().AsTime().UTC()
		if len(view.GetQuestions()) > 0 {
			t.Status, t.Questions = port.TaskInputRequired, taskQuestions(view.GetQuestions())
		}
		return t, nil
	}
	if desc.WorkflowCloseTime != nil {
		t.Updated = desc.WorkflowCloseTime.UTC()
	}
	x.ended(ctx, t, desc.Status, runID)
	return t, nil
}

// ended fills in a task whose workflow is over: completed with the call's
// result (failed when the call failed unexpectedly), failed when nobody
// answered in time or the workflow was stopped, cancelled.
func (x *tasks) ended(ctx context.Context, t *port.Task, status enumspb.WorkflowExecutionStatus, runID string) {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		t.Status, t.Message = port.TaskCancelled, "The task was cancelled; nothing more was done."
		return
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		t.Status, t.Message = port.TaskFailed, "The task was stopped before it ended."
		t.Error = &port.TaskError{Code: codeInternal, Message: t.Message}
		return
	}
	var res callsv1.RoundResult
	err := x.tc.GetWorkflow(ctx, t.ID, runID).Get(ctx, &res)
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && app.Type() == errAbandoned:
		t.Status, t.Message = port.TaskFailed, "Nobody answered the task's questions in time; nothing was done."
		t.Error = &port.TaskError{Code: codeInternal, Message: t.Message}
		return
	case err != nil || res.GetEnvelope() == "":
		t.Status, t.Message = port.TaskFailed, "The task ended without a result."
		t.Error = &port.TaskError{Code: codeInternal, Message: t.Message}
		return
	}
	var env toolcall.Envelope
	if json.Unmarshal([]byte(res.GetEnvelope()), &env) != nil || env.Status == "" {
		t.Status, t.Message = port.TaskFailed, "The task ended without a result."
		t.Error = &port.TaskError{Code: codeInternal, Message: t.Message}
		return
	}
	settle(t, &env)
}

// codeInternal is JSON-RPC's internal error.
const codeInternal = -32603

// settle makes t, a task whose call answered env, completed with env as its
// result — an error result included, as the call would have answered it —
// or failed when the call failed unexpectedly (domain code internal: what a
// caller could not have done otherwise), with the error id.
func settle(t *port.Task, env *toolcall.Envelope) {
	if env.DomainCode == toolcall.CodeInternal {
		t.Status, t.Message = port.TaskFailed, env.Message
		t.Error = &port.TaskError{Code: codeInternal, Message: env.Message}
		if env.ErrorID != "" {
			t.Error.Data = map[string]any{"error_id": env.ErrorID}
		}
		return
	}
	t.Status, t.Envelope = port.TaskCompleted, env
	t.Message = "The call is over."
	if env.IsError() {
		t.Message = "The call is over: " + env.DomainCode + "."
	}
}

// Answer delivers the answers to task id's questions as the answer update
// of its workflow, which checks them and applies them once.
func (x *tasks) Answer(ctx context.Context, p *identity.Principal, id string, responses map[string]port.Answer, key string) ([]string, error) {
	desc, err := x.describeTask(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil, &port.TaskRefusal{Reason: "the task is over; nothing was changed"}
	}
	answers := make(map[string]*callsv1.Answer, len(responses))
	for k, r := range responses {
		answers[k] = answerOf(r)
	}
	updateID := id + "/answer/" + randomHex()
	if key != "" {
		sum := sha256.Sum256([]byte(p.Subject + "\x00" + p.Agent + "\x00" + key))
		updateID = id + "/answer/" + hex.EncodeToString(sum[:16])
	}
	ctx, cancel := context.WithTimeout(ctx, x.wait)
	defer cancel()
	h, err := x.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		RunID:        desc.WorkflowExecution.RunID,
		UpdateID:     updateID,
		UpdateName:   x.answer.Name,
		Args:         []any{&callsv1.AnswerRequest{Caller: toolcall.CallerProto(p.Caller()), Answers: answers}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res callsv1.AnswerResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		if refused(err) {
			return nil, &port.TaskRefusal{Reason: refusalText(err)}
		}
		return nil, err
	}
	x.log.InfoContext(ctx, "mcp.task_answered", "task_id", id, "subject", p.Subject, "agent", p.Agent,
		"answers", len(answers), "ignored", len(res.GetIgnored()))
	return res.GetIgnored(), nil
}

// Extend moves the deadline of task id, whose side effect runs, by `by`
// past its current one, as the extend update of its workflow, which checks
// the caller, the reason and the task's latest deadline, and records the
// extension in the audit trail. The update id is derived from the caller
// and key: a retry gets the first extension's outcome, not a second one.
func (x *tasks) Extend(ctx context.Context, p *identity.Principal, id string, by time.Duration, reason, key string) (port.TaskDeadline, error) {
	desc, err := x.describeTask(ctx, p, id)
	if err != nil {
		return port.TaskDeadline{}, err
	}
	if desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return port.TaskDeadline{}, &port.TaskRefusal{Reason: "the task is over; nothing was changed"}
	}
	runID := desc.WorkflowExecution.RunID
	suffix := randomHex() + randomHex()
	if key != "" {
		sum := sha256.Sum256([]byte(p.Subject + "\x00" + p.Agent + "\x00" + key))
		suffix = hex.EncodeToString(sum[:16])
	}
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	// The new deadline is the current one plus by; the workflow refuses it
	// when the task's side effect does not run (no deadline).
	deadline := time.Now().Add(by)
	v, err := x.tc.QueryWorkflow(ctx, id, runID, x.view.Name)
	if err != nil {
		return port.TaskDeadline{}, fmt.Errorf("query task %s: %w", id, err)
	}
	var view callsv1.TaskView
	if err := v.Get(&view); err != nil {
		return port.TaskDeadline{}, fmt.Errorf("read task %s: %w", id, err)
	}
	if view.GetDeadline() != nil {
		deadline = view.GetDeadline().AsTime().Add(by)
	}
	h, err := x.tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id,
		RunID:      runID,
		UpdateID:   id + "/extend/" + suffix,
		UpdateName: x.extend.Name,
		Args: []any{&callsv1.ExtendTaskUpdate{
			Caller: toolcall.CallerProto(p.Caller()), Deadline: timestamppb.New(deadline), Reason: reason,
			CallId:  "calls-extend:" + suffix,
			Request: &callsv1.ExtendTaskRequest{TaskId: id, ExtendSeconds: int32(by / time.Second), Reason: reason},
		}},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res callsv1.ExtendTaskResult
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err != nil {
		if refused(err) {
			return port.TaskDeadline{}, &port.TaskRefusal{Reason: refusalText(err)}
		}
		return port.TaskDeadline{}, err
	}
	x.log.InfoContext(ctx, "mcp.task_extended", "task_id", id, "subject", p.Subject, "agent", p.Agent,
		"deadline", res.GetDeadline().AsTime().UTC().Format(time.RFC3339))
	return port.TaskDeadline{Deadline: res.GetDeadline().AsTime().UTC(), Max: res.GetMaxDeadline().AsTime().UTC()}, nil
}

// refusalText is what a refused answer tells its client: the workflow's
// reason, without the SDK's wrapping; a workflow that is gone is over.
func refusalText(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Message() + "; nothing was changed"
	}
	return "the task is over; nothing was changed"
}

// Cancel cancels task id's workflow; one that is over stays as it is.
func (x *tasks) Cancel(ctx context.Context, p *identity.Principal, id string) error {
	desc, err := x.describeTask(ctx, p, id)
	if err != nil {
		return err
	}
	if desc.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	if err := x.tc.CancelWorkflow(ctx, id, desc.WorkflowExecution.RunID); err != nil {
		if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
			return nil // ended meanwhile
		}
		return err
	}
	x.log.InfoContext(ctx, "mcp.task_cancelled", "task_id", id, "subject", p.Subject, "agent", p.Agent)
	return nil
}

// List lists the caller's long work of kinds (task id prefixes; "call"
// stands for the calls carried as tasks) from Temporal's visibility store,
// newest first.
func (x *tasks) List(ctx context.Context, p *identity.Principal, kinds []string, cursor string, n int) ([]string, string, error) {
	token, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, "", &port.TaskRefusal{Reason: "invalid cursor"}
	}
	quoted := make([]string, 0, len(kinds))
	for _, k := range kinds {
		if k == x.prefix {
			k = kindTask
		}
		quoted = append(quoted, strconv.Quote(k))
	}
	query := fmt.Sprintf("%s = %s AND %s IN (%s)", workflowcontract.SearchAttrAgent, strconv.Quote(p.Agent),
		workflowcontract.SearchAttrKind, strings.Join(quoted, ", "))
	ctx, cancel := context.WithTimeout(ctx, x.startWait)
	defer cancel()
	resp, err := x.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: int32(n), NextPageToken: token, Query: query})
	if _, ok := errors.AsType[*serviceerror.InvalidArgument](err); ok && len(token) > 0 {
		return nil, "", &port.TaskRefusal{Reason: "invalid cursor"}
	}
	if err != nil {
		return nil, "", fmt.Errorf("list tasks: %w", err)
	}
	ids := make([]string, 0, len(resp.GetExecutions()))
	for _, e := range resp.GetExecutions() {
		ids = append(ids, e.GetExecution().GetWorkflowId())
	}
	return ids, base64.RawURLEncoding.EncodeToString(resp.GetNextPageToken()), nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
