package schedules

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	schedulepb "go.temporal.io/api/schedule/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/jcs"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// TemporalConfig tunes the Temporal engine.
type TemporalConfig struct {
	// Namespace the schedules live in; "default" when empty.
	Namespace string
	// RunTimeout bounds one run workflow (30 minutes when zero).
	RunTimeout time.Duration
	// CatchupWindow is how late a run that Temporal could not start on time
	// (the server was down) may still start (10 minutes when zero).
	CatchupWindow time.Duration
	// Log receives the engine's events; discarded when nil.
	Log *slog.Logger
}

// TemporalEngine is the Engine on a Temporal cluster.
type TemporalEngine struct {
	c   client.Client
	cfg TemporalConfig
}

var _ Engine = (*TemporalEngine)(nil)

// NewTemporalEngine returns the engine over a connected client (one whose
// data converter encodes protobuf messages, internal/temporalclient).
func NewTemporalEngine(c client.Client, cfg TemporalConfig) *TemporalEngine {
	if cfg.Namespace == "" {
		cfg.Namespace = "default"
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = 30 * time.Minute
	}
	if cfg.CatchupWindow <= 0 {
		cfg.CatchupWindow = 10 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &TemporalEngine{c: c, cfg: cfg}
}

// Handler contracts of the approval workflow.
var (
	approveHandler = workflowcontract.HandlerOf(&schedulesv1.ApproveUpdate{})
	denyHandler    = workflowcontract.HandlerOf(&schedulesv1.DenyUpdate{})
)

// Search attribute keys (registered by internal/temporaldev).
var (
	saAgent  = temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrAgent)
	saTool   = temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrTool)
	saKind   = temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrKind)
	saStatus = temporal.NewSearchAttributeKeyKeyword(workflowcontract.SearchAttrStatus)
)

// maxDetailArgs bounds the arguments shown in a workflow's static details.
const maxDetailArgs = 4 << 10

// runAction is the action of s's Temporal Schedule: a run workflow with
// input run.
func (e *TemporalEngine) runAction(s *schedulesv1.Schedule, spec Spec, run *schedulesv1.RunInput) *client.ScheduleWorkflowAction {
	tool := s.GetAction().GetTool()
	return &client.ScheduleWorkflowAction{
		ID:                 RunWorkflowID(s.GetId()),
		Workflow:           runWorkflow.Name,
		Args:               []any{run},
		TaskQueue:          runWorkflow.TaskQueue,
		WorkflowRunTimeout: e.cfg.RunTimeout,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			saAgent.ValueSet(s.GetAgentId()), saTool.ValueSet(tool), saKind.ValueSet(runWorkflow.IDPrefix)),
		StaticSummary: clip(fmt.Sprintf("Run of schedule %s: %s as %s", s.GetId(), tool, s.GetAgentId()), 200),
		StaticDetails: fmt.Sprintf("One run of schedule `%s` (%s): calls **%s** through the mesh as agent `%s` "+
			"at invocation depth %d, with the run's workflow id as its idempotency key.\n\nArguments:\n\n```json\n%s\n```\n",
			s.GetId(), spec.Summary(), tool, s.GetAgentId(), run.GetDepth(), clip(argumentsJSON(s.GetAction()), maxDetailArgs)),
	}
}

// CreateSchedule implements Engine.
func (e *TemporalEngine) CreateSchedule(ctx context.Context, s *schedulesv1.Schedule, spec Spec, run *schedulesv1.RunInput) (string, error) {
	tool := s.GetAction().GetTool()
	_, err := e.c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:            s.GetTemporalScheduleId(),
		Spec:          TemporalSpec(spec),
		Action:        e.runAction(s, spec, run),
		Overlap:       enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		CatchupWindow: e.cfg.CatchupWindow,
		Paused:        true,
		Note:          "created paused: waiting for the owner's approval (the schedule-approval workflow of " + s.GetId() + ")",
		Memo: map[string]any{
			"schedule_id": s.GetId(), "agent": s.GetAgentId(), "tool": tool, "description": s.GetDescription(),
		},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			saAgent.ValueSet(s.GetAgentId()), saTool.ValueSet(tool), saKind.ValueSet("schedule")),
	})
	if err != nil && !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return "", err
	}
	return e.SpecHash(ctx, s.GetTemporalScheduleId())
}

// UpdateSchedule implements Engine. Temporal's update replaces the spec,
// the action and the state (paused, with the note) at once, so the changed
// schedule never runs unpaused; its policies stay.
func (e *TemporalEngine) UpdateSchedule(ctx context.Context, s *schedulesv1.Schedule, spec Spec, run *schedulesv1.RunInput, note string) (string, error) {
	tid := s.GetTemporalScheduleId()
	err := e.c.ScheduleClient().GetHandle(ctx, tid).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			cur := in.Description.Schedule
			if a, ok := cur.Action.(*client.ScheduleWorkflowAction); ok && len(a.Args) == 1 {
				if p, ok := a.Args[0].(*commonpb.Payload); ok && runRevision(p) > run.GetRevision() {
					return nil, temporal.ErrSkipScheduleUpdate // a later change got there first
				}
			}
			ts := TemporalSpec(spec)
			sa := temporal.NewSearchAttributes(saAgent.ValueSet(s.GetAgentId()), saTool.ValueSet(s.GetAction().GetTool()), saKind.ValueSet("schedule"))
			return &client.ScheduleUpdate{
				Schedule: &client.Schedule{
					Action: e.runAction(s, spec, run),
					Spec:   &ts,
					Policy: cur.Policy,
					State:  &client.ScheduleState{Paused: true, Note: note},
				},
				TypedSearchAttributes: &sa,
			}, nil
		},
	})
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return "", ErrNotFound
	}
	if err != nil {
		return "", err
	}
	resp, err := e.c.WorkflowService().DescribeSchedule(ctx, &workflowservice.DescribeScheduleRequest{Namespace: e.cfg.Namespace, ScheduleId: tid})
	if err != nil {
		return "", err
	}
	in := resp.GetSchedule().GetAction().GetStartWorkflow().GetInput().GetPayloads()
	if len(in) != 1 || runRevision(in[0]) != run.GetRevision() {
		return "", ErrSuperseded
	}
	return HashSchedule(resp.GetSchedule())
}

// runRevision is the revision of a run workflow's input as a Temporal
// Schedule holds it (-1 when it cannot be read).
func runRevision(p *commonpb.Payload) int32 {
	var run schedulesv1.RunInput
	if err := temporalclient.DataConverter().FromPayload(p, &run); err != nil {
		return -1
	}
	return run.GetRevision()
}

// TemporalSpec is the Temporal form of a spec: an interval with no offset,
// or one structured calendar with the cron's values as explicit ranges.
func TemporalSpec(spec Spec) client.ScheduleSpec {
	if spec.cal == nil {
		return client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: spec.Interval}}}
	}
	c := spec.cal
	return client.ScheduleSpec{
		Calendars: []client.ScheduleCalendarSpec{{
			Second:     []client.ScheduleRange{{Start: 0}},
			Minute:     ranges(c.minute[:], 0),
			Hour:       ranges(c.hour[:], 0),
			DayOfMonth: ranges(c.dom[1:], 1),
			Month:      ranges(c.month[1:], 1),
			DayOfWeek:  ranges(c.dow[:], 0),
			Comment:    "cron " + spec.Cron,
		}},
		TimeZoneName: spec.Location.String(),
	}
}

// ranges turns a set of values (set[i] is value base+i) into runs of
// consecutive values.
func ranges(set []bool, base int) []client.ScheduleRange {
	var out []client.ScheduleRange
	for i := 0; i < len(set); i++ {
		if !set[i] {
			continue
		}
		j := i
		for j+1 < len(set) && set[j+1] {
			j++
		}
		out = append(out, client.ScheduleRange{Start: base + i, End: base + j})
		i = j
	}
	return out
}

// SpecHash implements Engine.
func (e *TemporalEngine) SpecHash(ctx context.Context, temporalID string) (string, error) {
	resp, err := e.c.WorkflowService().DescribeSchedule(ctx, &workflowservice.DescribeScheduleRequest{
		Namespace: e.cfg.Namespace, ScheduleId: temporalID,
	})
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return "", ErrNotFound
	}
	if err != nil {
		return "", err
	}
	return HashSchedule(resp.GetSchedule())
}

// HashSchedule is the spec hash of a Temporal Schedule: SHA-256 over the
// RFC 8785 canonical JSON of its spec, action and policies as Temporal
// holds them (what runs, when, and how runs overlap or catch up; not its
// paused state or notes), truncated to 128 bits, in hex.
func HashSchedule(s *schedulepb.Schedule) (string, error) {
	js, err := protojson.Marshal(&schedulepb.Schedule{Spec: s.GetSpec(), Action: s.GetAction(), Policies: s.GetPolicies()})
	if err != nil {
		return "", fmt.Errorf("encode schedule: %w", err)
	}
	canon, err := jcs.Transform(js)
	if err != nil {
		return "", fmt.Errorf("canonicalize schedule: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:16]), nil
}

// SetPaused implements Engine.
func (e *TemporalEngine) SetPaused(ctx context.Context, temporalID string, paused bool, note string) error {
	h := e.c.ScheduleClient().GetHandle(ctx, temporalID)
	var err error
	if paused {
		err = h.Pause(ctx, client.SchedulePauseOptions{Note: note})
	} else {
		err = h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note})
	}
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	// Confirm that it took effect: describe until the state shows it.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		d, err := h.Describe(ctx)
		if err != nil {
			return fmt.Errorf("confirm the schedule is %s: %w", pausedWord(paused), err)
		}
		if d.Schedule.State != nil && d.Schedule.State.Paused == paused {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the schedule is still not %s: %w", pausedWord(paused), ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func pausedWord(paused bool) string {
	if paused {
		return "paused"
	}
	return "unpaused"
}

// DeleteSchedule implements Engine.
func (e *TemporalEngine) DeleteSchedule(ctx context.Context, temporalID string) error {
	err := e.c.ScheduleClient().GetHandle(ctx, temporalID).Delete(ctx)
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return nil
	}
	return err
}

// StartApproval implements Engine.
func (e *TemporalEngine) StartApproval(ctx context.Context, workflowID string, in *schedulesv1.ApprovalInput) error {
	_, err := e.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        workflowID,
		TaskQueue: approvalWorkflow.TaskQueue,
		// A retried create finds the workflow it started; a finished
		// approval is never asked again under the same hash.
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		// The workflow ends itself at its timeout; this is a backstop.
		WorkflowExecutionTimeout: in.GetTimeout().AsDuration() + 24*time.Hour,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			saAgent.ValueSet(in.GetAgentId()), saTool.ValueSet(approvalTool(in)),
			saKind.ValueSet(approvalWorkflow.IDPrefix), saStatus.ValueSet("waiting")),
		StaticSummary: clip(fmt.Sprintf("Approve %s %s: %s %s for %s", approvalWhat(in), in.GetScheduleId(), in.GetAction().GetTool(), in.GetSpecSummary(), in.GetAgentId()), 200),
		StaticDetails: ApprovalDetails(workflowID, in),
	}, approvalWorkflow.Name, in)
	if _, ok := errors.AsType[*serviceerror.WorkflowExecutionAlreadyStarted](err); ok {
		return nil
	}
	return err
}

// approvalTool is the tool that asked for an approval: schedules_create for
// a new schedule, schedules_update for a change.
func approvalTool(in *schedulesv1.ApprovalInput) string {
	if in.GetRevision() > 0 {
		return "schedules_update"
	}
	return "schedules_create"
}

// approvalWhat names what an approval is about.
func approvalWhat(in *schedulesv1.ApprovalInput) string {
	if in.GetRevision() > 0 {
		return fmt.Sprintf("change %d of schedule", in.GetRevision())
	}
	return "schedule"
}

// ApprovalDetails is the Markdown an operator reads on the approval
// workflow's page: what would run, and how to decide.
func ApprovalDetails(workflowID string, in *schedulesv1.ApprovalInput) string {
	var b strings.Builder
	if in.GetRevision() > 0 {
		fmt.Fprintf(&b, "Schedule `%s` was changed (change %d); until this change is approved it runs nothing.\n\n", in.GetScheduleId(), in.GetRevision())
	}
	fmt.Fprintf(&b, "Agent `%s` asks to call **%s** %s", in.GetAgentId(), in.GetAction().GetTool(), in.GetSpecSummary())
	if d := in.GetDescription(); d != "" {
		fmt.Fprintf(&b, ": %s", d)
	}
	fmt.Fprintf(&b, "\n\nArguments:\n\n```json\n%s\n```\n\n", clip(argumentsJSON(in.GetAction()), maxDetailArgs))
	if len(in.GetNextRunTimes()) > 0 {
		b.WriteString("First runs once approved:")
		for _, t := range in.GetNextRunTimes() {
			fmt.Fprintf(&b, " %s", t.AsTime().UTC().Format(time.RFC3339))
		}
		b.WriteString("\n\n")
	}
	fmt.Fprintf(&b, "Temporal Schedule `%s`, spec hash `%s`. Undecided after %s, the schedule expires.\n\n",
		in.GetTemporalScheduleId(), in.GetSpecHash(), Words(in.GetTimeout().AsDuration()))
	fmt.Fprintf(&b, "To decide, send the **%s** or **%s** update with input `{\"note\": \"why\"}`, or run:\n\n", approveHandler.Name, denyHandler.Name)
	fmt.Fprintf(&b, "    temporal workflow update execute --workflow-id %s --name %s --input '{\"note\":\"ok\"}'\n", workflowID, approveHandler.Name)
	return b.String()
}

// Approve implements Engine.
func (e *TemporalEngine) Approve(ctx context.Context, workflowID string, u *schedulesv1.ApproveUpdate) (string, error) {
	return e.update(ctx, workflowID, approveHandler.Name, u)
}

// Deny implements Engine.
func (e *TemporalEngine) Deny(ctx context.Context, workflowID string, u *schedulesv1.DenyUpdate) (string, error) {
	return e.update(ctx, workflowID, denyHandler.Name, u)
}

// update sends an approval update. The workflow refuses a decision with a
// non-retryable application error, and fails one it could not carry out
// now with a retryable one.
func (e *TemporalEngine) update(ctx context.Context, workflowID, name string, arg any) (string, error) {
	h, err := e.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: workflowID, UpdateName: name, Args: []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var res string
	if err == nil {
		err = h.Get(ctx, &res)
	}
	if err == nil {
		return res, nil
	}
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return "", fmt.Errorf("%w: its approval request %s has ended", ErrDecisionRefused, workflowID)
	}
	if ae, ok := errors.AsType[*temporal.ApplicationError](err); ok && ae.NonRetryable() {
		return "", fmt.Errorf("%w: %s", ErrDecisionRefused, ae.Message())
	}
	return "", err
}

// WithdrawApproval implements Engine.
func (e *TemporalEngine) WithdrawApproval(ctx context.Context, workflowID string) error {
	err := e.c.CancelWorkflow(ctx, workflowID, "")
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return nil
	}
	return err
}

func argumentsJSON(a *schedulesv1.Action) string {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(a.GetArguments())
	if err != nil || len(b) == 0 {
		return "{}"
	}
	return string(b)
}

// clip shortens s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && (s[cut]&0xC0) == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
