package workflows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// ToolRun is the tool that starts runs (the ToolmeshTool search attribute);
// ToolExtendRun extends them (the audit trail names it).
const (
	ToolRun       = "workflows_run"
	ToolExtendRun = "workflows_extend_run"
)

// RunID is the id of the run an agent's call starts: derived from the
// call's idempotency key, so a retried call names the run (and the
// workflow) its first attempt started; random when the call has no key.
func RunID(agent, idempotencyKey string, now time.Time) string {
	if idempotencyKey == "" {
		return ids.NewAt("run", now)
	}
	return ids.Derive("run", "workflows.run", agent, idempotencyKey)
}

// Ended reports whether a run status is final.
func Ended(st workflowsv1.RunStatus) bool {
	switch st {
	case workflowsv1.RunStatus_RUN_STATUS_COMPLETED, workflowsv1.RunStatus_RUN_STATUS_FAILED, workflowsv1.RunStatus_RUN_STATUS_CANCELLED:
		return true
	}
	return false
}

// Run implements WorkflowsService.Run: it records the run, starts its
// workflow and waits for the outcome as long as the request (and its
// deadline) allow.
func (s *Service) Run(ctx context.Context, req *workflowsv1.RunRequest) (*workflowsv1.RunResponse, error) {
	call := mesh.FromContext(ctx)
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if depth := call.Caller.Depth; depth >= MaxDepth {
		// As sending a message: nothing refills with time (not
		// rate_limited), and neither the caller nor the arguments are at
		// fault.
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("cannot run a workflow: invocation depth %d exceeds maximum of %d", depth, MaxDepth))
	}
	if s.engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("runs are unavailable: the workflows service runs without Temporal"))
	}
	w, err := s.ownWorkflow(ctx, req.GetWorkflowId(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	if b, err := protojson.Marshal(req.GetInput()); err == nil && len(b) > maxInputBytes {
		return nil, invalid("input", "workflows.input", fmt.Sprintf("the input is %d bytes; at most %d", len(b), maxInputBytes))
	}
	timeout := s.cfg.RunTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	if timeout < minRunTimeout || timeout > s.cfg.MaxRunDuration {
		return nil, invalid("timeout_seconds", "workflows.run_timeout", fmt.Sprintf("a run's timeout is %s to %s", minRunTimeout, s.cfg.MaxRunDuration))
	}
	now := s.nowMillis()
	id := RunID(agent, call.IdempotencyKey, now)
	r := &workflowsv1.Run{
		RunId:              id,
		WorkflowId:         w.GetWorkflowId(),
		Version:            w.GetVersion(),
		WorkflowName:       w.GetName(),
		AgentId:            agent,
		Status:             workflowsv1.RunStatus_RUN_STATUS_RUNNING,
		Input:              req.GetInput(),
		Nodes:              pendingNodes(w.GetDefinition()),
		CreateTime:         timestamppb.New(now),
		UpdateTime:         timestamppb.New(now),
		Deadline:           timestamppb.New(now.Add(timeout)),
		TemporalWorkflowId: WorkflowID(agent, id),
	}
	// How long this call waits for the outcome is not part of the run.
	digested := proto.Clone(req).(*workflowsv1.RunRequest)
	digested.WaitSeconds = nil
	stored, created, err := s.store.CreateRun(ctx, r, idempotency.Digest(digested))
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(call.IdempotencyKey)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record run: %w", err))
	}
	if stored.GetAgentId() != agent {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("run id %s is taken", id))
	}
	if !created {
		idempotency.MarkReplay(ctx, call.IdempotencyKey)
	}
	if Ended(stored.GetStatus()) {
		return &workflowsv1.RunResponse{Run: stored}, nil
	}
	if stored.GetVersion() != w.GetVersion() {
		// A retry after an update: the run keeps the version it started.
		if w, err = s.store.GetWorkflow(ctx, stored.GetWorkflowId(), stored.GetVersion()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get the run's version: %w", err))
		}
	}
	// Started on a retry too: the first attempt may have stored the run
	// and failed before its workflow started. Starting is idempotent by id.
	starter := call.Caller
	starter.Agent = agent
	in := &workflowsv1.RunWorkflowInput{
		RunId:        id,
		WorkflowId:   w.GetWorkflowId(),
		Version:      w.GetVersion(),
		WorkflowName: w.GetName(),
		Definition:   w.GetDefinition(),
		Input:        stored.GetInput(),
		Starter:      toolcall.CallerProto(starter),
		RefusedTools: s.refusedTools(w.GetDefinition(), call.Caller.Grants),
		Deadline:     stored.GetDeadline(),
		MaxDeadline:  timestamppb.New(stored.GetCreateTime().AsTime().Add(s.cfg.MaxRunDuration)),
		CallTimeout:  durationpb.New(s.cfg.CallTimeout),
	}
	if err := s.runCall(id).Start(ctx, created, func(ctx context.Context) error { return s.engine.StartRun(ctx, in) },
		func(ctx context.Context) error { return s.store.DeleteRun(ctx, id) }); err != nil {
		return nil, err
	}
	if created {
		s.log.InfoContext(ctx, "workflows.run_started", "run_id", id, "workflow_id", w.GetWorkflowId(), "version", w.GetVersion(),
			"agent", agent, "workflow", stored.GetTemporalWorkflowId(), "refused_tools", len(in.GetRefusedTools()))
	}
	return &workflowsv1.RunResponse{Run: s.await(ctx, stored, workflowrun.WaitBudget(req.WaitSeconds, s.cfg.DefaultWait))}, nil
}

// refusedTools are the tools of def's action nodes that a caller holding
// grants may not call, with why: what the run may not do, decided once,
// when it starts.
func (s *Service) refusedTools(def *workflowsv1.Definition, grants []string) map[string]string {
	out := map[string]string{}
	for _, n := range def.GetNodes() {
		tool := n.GetAction().GetTool()
		if tool == "" {
			continue
		}
		b, ok := s.tools[tool]
		if !ok {
			out[tool] = "the tool is not known to this mesh"
			continue
		}
		if ok, why := b.Tool().PermittedBy(grants); !ok {
			out[tool] = why
		}
	}
	return out
}

// pendingNodes are a new run's nodes: every one pending.
func pendingNodes(def *workflowsv1.Definition) []*workflowsv1.NodeExecution {
	out := make([]*workflowsv1.NodeExecution, len(def.GetNodes()))
	for i, n := range def.GetNodes() {
		out[i] = &workflowsv1.NodeExecution{NodeId: n.GetId(), Status: workflowsv1.NodeStatus_NODE_STATUS_PENDING}
	}
	return out
}

// runCall is the long-running call of run id.
func (s *Service) runCall(id string) workflowrun.Call {
	return workflowrun.Call{Event: "workflows.run", What: "run", IDKey: "run_id", ID: id, Log: s.log}
}

// await waits up to wait (and never past ctx's deadline less a margin to
// reply) for the run's workflow to end, and returns the run with its
// outcome, or as it is so far when the wait runs out.
func (s *Service) await(ctx context.Context, r *workflowsv1.Run, wait time.Duration) *workflowsv1.Run {
	out := workflowrun.Await(ctx, s.runCall(r.GetRunId()), r, wait, func(ctx context.Context) (*workflowsv1.RunOutcome, error) {
		return s.engine.WaitRun(ctx, r.GetTemporalWorkflowId())
	}, s.ended)
	if !Ended(out.GetStatus()) {
		return s.live(ctx, out)
	}
	return out
}

// queryTimeout bounds a question to a run's workflow.
const queryTimeout = time.Second

// live is r as its workflow says it is now (its state query), or as
// stored when the workflow cannot answer in time (no worker).
func (s *Service) live(ctx context.Context, r *workflowsv1.Run) *workflowsv1.Run {
	if s.engine == nil || Ended(r.GetStatus()) {
		return r
	}
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	o, err := s.engine.QueryRun(qctx, r.GetTemporalWorkflowId())
	cancel()
	if err != nil {
		s.log.DebugContext(ctx, "workflows.run_query_failed", "run_id", r.GetRunId(), "error", err)
		return r
	}
	return s.ended(ctx, r, o)
}

// ended returns r as the workflow's outcome o says it is. An end is
// recorded (the workflow records it itself before it ends, so this changes
// nothing then, and covers a workflow that could not).
func (s *Service) ended(ctx context.Context, r *workflowsv1.Run, o *workflowsv1.RunOutcome) *workflowsv1.Run {
	if !Ended(o.GetStatus()) {
		return withOutcome(r, o)
	}
	rec, _, err := s.store.RecordRun(ctx, r.GetRunId(), o, s.nowMillis())
	if err != nil {
		s.log.WarnContext(ctx, "workflows.run_record_failed", "run_id", r.GetRunId(), "error", err)
		return withOutcome(r, o)
	}
	return rec
}

// withOutcome returns a copy of r as o says it is.
func withOutcome(r *workflowsv1.Run, o *workflowsv1.RunOutcome) *workflowsv1.Run {
	out := proto.Clone(r).(*workflowsv1.Run)
	if o.GetStatus() != workflowsv1.RunStatus_RUN_STATUS_UNSPECIFIED {
		out.Status = o.GetStatus()
	}
	out.Output, out.Error, out.EndTime = o.GetOutput(), o.GetError(), o.GetEndTime()
	if len(o.GetNodes()) > 0 {
		out.Nodes = o.GetNodes()
	}
	if o.GetDeadline() != nil {
		out.Deadline = o.GetDeadline()
	}
	return out
}

// visibleRun returns a run the caller may see: its own, or any for the
// owner. Anyone else's is not found, as if it did not exist.
func (s *Service) visibleRun(ctx context.Context, id string) (*workflowsv1.Run, error) {
	caller := mesh.FromContext(ctx).Caller
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	r, err := s.store.GetRun(ctx, id)
	if errors.Is(err, ErrNotFound) || (err == nil && r.GetAgentId() != caller.Agent && !caller.HasRole(mesh.RoleOwner)) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("run %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get run: %w", err))
	}
	return r, nil
}

// ownRun is a run the caller started. Anyone else, the owner included, is
// refused by name: only the agent whose grants a run carries steers it.
// With ownerToo the owner may act on any agent's run too (cancelling: a
// brake, not a steer).
func (s *Service) ownRun(ctx context.Context, id, what string, ownerToo bool) (*workflowsv1.Run, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.store.GetRun(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("run %s not found", id))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get run: %w", err))
	}
	if r.GetAgentId() != agent {
		if ownerToo && mesh.FromContext(ctx).Caller.HasRole(mesh.RoleOwner) {
			return r, nil
		}
		who := "only the agent that started a run may " + what + " it"
		if ownerToo {
			who = "only the agent that started a run, or the owner, may " + what + " it"
		}
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("run %s was started by another agent; %s", id, who))
	}
	return r, nil
}

// GetRun implements WorkflowsService.GetRun: the record, and for a run in
// flight the workflow's own word (its state query), so every node shows
// where it is now.
func (s *Service) GetRun(ctx context.Context, req *workflowsv1.GetRunRequest) (*workflowsv1.GetRunResponse, error) {
	r, err := s.visibleRun(ctx, req.GetRunId())
	if err != nil {
		return nil, err
	}
	return &workflowsv1.GetRunResponse{Run: s.live(ctx, r)}, nil
}

// ListRuns implements WorkflowsService.ListRuns: an agent's own runs, or
// for the owner every agent's (the runs GetRun shows the owner).
func (s *Service) ListRuns(ctx context.Context, req *workflowsv1.ListRunsRequest) (*workflowsv1.ListRunsResponse, error) {
	filter, err := mesh.ListedAgent(ctx, req.GetAgentId(), "runs")
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.ListRuns(ctx, filter, req.GetWorkflowId(), req.GetStatus(), offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list runs: %w", err))
	}
	return &workflowsv1.ListRunsResponse{Runs: list, Page: paging.New(offset, limit, total)}, nil
}

// cancelWait bounds how long CancelRun waits for the workflow to end.
const cancelWait = 5 * time.Second

// CancelRun implements WorkflowsService.CancelRun.
func (s *Service) CancelRun(ctx context.Context, req *workflowsv1.CancelRunRequest) (*workflowsv1.CancelRunResponse, error) {
	r, err := s.ownRun(ctx, req.GetRunId(), "cancel", true)
	if err != nil {
		return nil, err
	}
	if Ended(r.GetStatus()) {
		return &workflowsv1.CancelRunResponse{Run: r}, nil
	}
	if s.engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("runs are unavailable: the workflows service runs without Temporal"))
	}
	if err := s.engine.CancelRun(ctx, r.GetTemporalWorkflowId()); err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not cancel the run; try again", fmt.Errorf("cancel run %s: %w", r.GetRunId(), err))
	}
	s.log.InfoContext(ctx, "workflows.run_cancel_requested", "run_id", r.GetRunId(), "agent", r.GetAgentId(), "by", mesh.FromContext(ctx).Caller.Subject)
	return &workflowsv1.CancelRunResponse{Run: s.await(ctx, r, cancelWait)}, nil
}

// ExtendRun implements WorkflowsService.ExtendRun: the new deadline goes to
// the run's workflow as the extend update, whose validator refuses it when
// the run has ended or the deadline passes the run's maximum; the workflow
// records the extension in the audit trail.
func (s *Service) ExtendRun(ctx context.Context, req *workflowsv1.ExtendRunRequest) (*workflowsv1.ExtendRunResponse, error) {
	call := mesh.FromContext(ctx)
	r, err := s.ownRun(ctx, req.GetRunId(), "extend", false)
	if err != nil {
		return nil, err
	}
	if Ended(r.GetStatus()) {
		return nil, notRunning(r)
	}
	if s.engine == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("runs are unavailable: the workflows service runs without Temporal"))
	}
	r = s.live(ctx, r)
	deadline := r.GetDeadline().AsTime().Add(time.Duration(req.GetExtendSeconds()) * time.Second)
	if latest := r.GetCreateTime().AsTime().Add(s.cfg.MaxRunDuration); deadline.After(latest) {
		return nil, invalid("extend_seconds", "workflows.max_run_duration", fmt.Sprintf("a run takes at most %s from its start: run %s may last until %s at the latest, and its deadline is %s now",
			s.cfg.MaxRunDuration, r.GetRunId(), latest.UTC().Format(time.RFC3339), r.GetDeadline().AsTime().UTC().Format(time.RFC3339)))
	}
	// A retried call (the same key) is the same update and the same audit
	// record.
	key := call.IdempotencyKey
	if key == "" {
		key = ids.New("key")
	}
	o, err := s.engine.ExtendRun(ctx, r.GetTemporalWorkflowId(), "extend/"+key, &workflowsv1.ExtendUpdate{
		Deadline:    timestamppb.New(deadline),
		Reason:      req.GetReason(),
		RequestedBy: call.Caller.Subject,
		CallId:      ids.Derive("ext", "workflows.extend_run", r.GetAgentId(), key),
		Request:     req,
	})
	if rej, ok := errors.AsType[*ExtendRejectedError](err); ok {
		if rej.Reason == workflowsv1.ExtendRejection_EXTEND_REJECTION_INVALID_DEADLINE {
			return nil, invalid("extend_seconds", "workflows.max_run_duration", rej.Message)
		}
		err = ErrNoWorkflow
	}
	if errors.Is(err, ErrNoWorkflow) {
		if cur, gerr := s.store.GetRun(ctx, r.GetRunId()); gerr == nil && Ended(cur.GetStatus()) {
			return nil, notRunning(cur)
		}
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("run %s is no longer running", r.GetRunId()))
	}
	if err != nil {
		return nil, rpcerror.WithCause(connect.CodeUnavailable, "could not extend the run; try again", fmt.Errorf("extend run %s: %w", r.GetRunId(), err))
	}
	rec, _, err := s.store.RecordRun(ctx, r.GetRunId(), o, s.nowMillis())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record extension: %w", err))
	}
	s.log.InfoContext(ctx, "workflows.run_extended", "run_id", r.GetRunId(), "agent", r.GetAgentId(), "subject", call.Caller.Subject,
		"deadline", o.GetDeadline().AsTime().UTC().Format(time.RFC3339))
	return &workflowsv1.ExtendRunResponse{Run: rec}, nil
}

func notRunning(r *workflowsv1.Run) error {
	return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("run %s has ended: it is %s", r.GetRunId(), protoenum.Word(r.GetStatus())))
}

// RecordRun implements WorkflowsService.RecordRun, for the run workflow
// (mesh service role).
func (s *Service) RecordRun(ctx context.Context, req *workflowsv1.RecordRunRequest) (*workflowsv1.RecordRunResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	o := &workflowsv1.RunOutcome{RunId: req.GetRunId(), Status: req.GetStatus(), Output: req.GetOutput(), Error: req.GetError(),
		Nodes: req.GetNodes(), Deadline: req.GetDeadline(), EndTime: req.GetEndTime()}
	r, changed, err := s.store.RecordRun(ctx, req.GetRunId(), o, s.nowMillis())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("run %s not found", req.GetRunId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record run: %w", err))
	}
	if changed && Ended(r.GetStatus()) {
		s.log.InfoContext(ctx, "workflows.run_ended", "run_id", r.GetRunId(), "agent", r.GetAgentId(), "status", protoenum.Word(r.GetStatus()),
			"failed_node", r.GetError().GetNodeId())
	}
	return &workflowsv1.RecordRunResponse{Run: r}, nil
}

// invalid is an invalid_argument naming one request field.
func invalid(field, rule, msg string) error {
	return boundary.InvalidArgument(boundary.Violation{Field: field, Rule: rule, Message: msg})
}
