package owner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// SearchStatusWaiting is the ToolmeshStatus of an ask waiting for its
// answer; the worker moves it to answered, expired or cancelled.
const SearchStatusWaiting = "waiting"

// TemporalEngine runs asks on Temporal.
type TemporalEngine struct {
	c client.Client
}

var _ Engine = (*TemporalEngine)(nil)

// NewTemporalEngine returns Engine over a connected client (one that
// encodes payloads as protobuf JSON: internal/temporalclient).
func NewTemporalEngine(c client.Client) *TemporalEngine {
	return &TemporalEngine{c: c}
}

// StartAsk implements Engine.
func (t *TemporalEngine) StartAsk(ctx context.Context, in *ownerv1.AskWorkflowInput) error {
	id := WorkflowID(in.GetAgentId(), in.GetAskId())
	return workflowrun.Once(ctx, t.c, workflowrun.Start{
		Contract: askWorkflow(),
		ID:       id,
		Agent:    in.GetAgentId(),
		Tool:     in.GetTool(),
		Status:   SearchStatusWaiting,
		Summary:  AskSummary(in),
		Details:  AskDetails(in, id),
	}, in)
}

// AskSummary is the one line the Temporal UI shows for an ask workflow.
func AskSummary(in *ownerv1.AskWorkflowInput) string {
	return fmt.Sprintf("Ask from %s: %s", in.GetAgentId(), clip(oneLine(in.GetQuestion()), 120))
}

// AskDetails is the ask workflow's static details (Markdown): the question,
// the choices, and how to answer from the UI and the CLI.
func AskDetails(in *ownerv1.AskWorkflowInput, workflowID string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s asks:** %s\n\n", in.GetAgentId(), clip(in.GetQuestion(), 2000))
	example := "your answer"
	if opts := in.GetOptions(); len(opts) > 0 {
		example = opts[0]
		b.WriteString("**Answer with one of:** ")
		for i, o := range opts {
			if i > 0 {
				b.WriteString(" · ")
			}
			fmt.Fprintf(&b, "`%s`", clip(o, 200))
		}
		b.WriteString("\n\n")
	} else {
		b.WriteString("**Answer:** free text\n\n")
	}
	if c := in.GetContext(); c != "" {
		fmt.Fprintf(&b, "**Context:** %s\n\n", clip(c, 2000))
	}
	if e := in.GetExpireTime(); e != nil {
		fmt.Fprintf(&b, "**Expires:** %s\n\n", e.AsTime().UTC().Format(time.RFC3339))
	}
	input := fmt.Sprintf(`{"answer": %q}`, example)
	fmt.Fprintf(&b, "To answer, send the **answer** update (or the **answer** signal) with input `%s`, or from a shell:\n\n", input)
	fmt.Fprintf(&b, "    temporal workflow update execute --workflow-id '%s' --name answer --input '%s'\n", workflowID, strings.ReplaceAll(input, "'", `'\''`))
	return b.String()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// WaitAsk implements Engine.
func (t *TemporalEngine) WaitAsk(ctx context.Context, workflowID string) (*ownerv1.AskOutcome, error) {
	var out ownerv1.AskOutcome
	cancelled, err := workflowrun.Wait(ctx, t.c, workflowID, &out)
	if cancelled {
		_, askID, _ := ParseWorkflowID(workflowID)
		return &ownerv1.AskOutcome{AskId: askID, Status: ownerv1.AskStatus_ASK_STATUS_CANCELLED, ResolveTime: timestamppb.Now()}, nil
	}
	if errors.Is(err, workflowrun.ErrNoWorkflow) {
		return nil, ErrNoWorkflow
	}
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// AnswerAsk implements Engine.
func (t *TemporalEngine) AnswerAsk(ctx context.Context, workflowID, updateID string, u *ownerv1.AnswerUpdate) (*ownerv1.AskOutcome, error) {
	h, err := t.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID,
		UpdateID:     updateID,
		UpdateName:   workflowcontract.HandlerOf(u).Name,
		Args:         []any{u},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return nil, updateError(err)
	}
	// The update answers with the ask's state as plain JSON, for people
	// using the CLI; the outcome is what was sent.
	if err := h.Get(ctx, nil); err != nil {
		return nil, updateError(err)
	}
	by := u.GetAnsweredBy()
	if by == "" {
		by = "temporal"
	}
	return &ownerv1.AskOutcome{Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: u.GetAnswer(), AnsweredBy: by, ResolveTime: timestamppb.Now()}, nil
}

// ExtendAsk implements Engine.
func (t *TemporalEngine) ExtendAsk(ctx context.Context, workflowID, updateID string, u *ownerv1.ExtendUpdate) (time.Time, error) {
	h, err := t.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflowID,
		UpdateID:     updateID,
		UpdateName:   workflowcontract.HandlerOf(u).Name,
		Args:         []any{u},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return time.Time{}, updateError(err)
	}
	var st askState
	if err := h.Get(ctx, &st); err != nil {
		return time.Time{}, updateError(err)
	}
	at, err := time.Parse(time.RFC3339Nano, st.ExpireTime)
	if err != nil {
		return time.Time{}, fmt.Errorf("the extend update answered expire time %q: %w", st.ExpireTime, err)
	}
	return at, nil
}

// updateError maps the answer update's failures: the validator's
// rejections (application errors typed by AskRejection) and a workflow that
// has ended.
func updateError(err error) error {
	if app, ok := errors.AsType[*temporal.ApplicationError](err); ok {
		for _, r := range []ownerv1.AskRejection{ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER, ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING,
			ownerv1.AskRejection_ASK_REJECTION_INVALID_EXPIRY} {
			if app.Type() == r.String() {
				return &AnswerRejectedError{Reason: r, Message: app.Message()}
			}
		}
	}
	if _, notFound := errors.AsType[*serviceerror.NotFound](err); notFound {
		return ErrNoWorkflow
	}
	return err
}

// askState is the status query's answer: plain JSON, as StatusQuery in
// the contract describes it.
type askState struct {
	AskID      string `json:"ask_id"`
	Status     string `json:"status"`
	Answer     string `json:"answer"`
	AnsweredBy string `json:"answered_by"`
	ExpireTime string `json:"expire_time"`
}

// QueryAsk implements Engine.
func (t *TemporalEngine) QueryAsk(ctx context.Context, workflowID string) (*ownerv1.AskOutcome, error) {
	var st askState
	err := workflowrun.Query(ctx, t.c, workflowID, workflowcontract.HandlerOf(&ownerv1.StatusQuery{}).Name, &st)
	if errors.Is(err, workflowrun.ErrNoWorkflow) {
		return nil, ErrNoWorkflow
	}
	if err != nil {
		return nil, err
	}
	out := &ownerv1.AskOutcome{AskId: st.AskID, Answer: st.Answer, AnsweredBy: st.AnsweredBy}
	switch st.Status {
	case "waiting":
		out.Status = ownerv1.AskStatus_ASK_STATUS_PENDING
	case "answered":
		out.Status = ownerv1.AskStatus_ASK_STATUS_ANSWERED
	case "expired":
		out.Status = ownerv1.AskStatus_ASK_STATUS_EXPIRED
	case "cancelled":
		out.Status = ownerv1.AskStatus_ASK_STATUS_CANCELLED
	default:
		return nil, fmt.Errorf("the status query answered status %q", st.Status)
	}
	if out.Status != ownerv1.AskStatus_ASK_STATUS_PENDING {
		out.ResolveTime = timestamppb.Now()
	}
	return out, nil
}

// CancelAsk implements Engine.
func (t *TemporalEngine) CancelAsk(ctx context.Context, workflowID string) error {
	return workflowrun.Cancel(ctx, t.c, workflowID)
}
