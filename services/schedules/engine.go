package schedules

import (
	"context"
	"errors"

	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// Engine runs schedules: Temporal Schedules and the approval workflows in
// front of them. Temporal (NewTemporalEngine) is the one used in production;
// the service's tests use a fake.
type Engine interface {
	// CreateSchedule creates the Temporal Schedule of s, paused, starting a
	// run workflow with input run at each time of spec. A schedule that
	// already exists under s's Temporal id is kept (a retried create). It
	// returns the schedule's spec hash (see SpecHash).
	CreateSchedule(ctx context.Context, s *schedulesv1.Schedule, spec Spec, run *schedulesv1.RunInput) (specHash string, err error)
	// UpdateSchedule changes the Temporal Schedule of s to spec and run and
	// pauses it with note, unless it already holds a later revision of s
	// (run.revision), and returns the spec hash it holds after. ErrNotFound
	// when the schedule does not exist; ErrSuperseded when, after the
	// change, it holds another revision than run's (a concurrent change).
	UpdateSchedule(ctx context.Context, s *schedulesv1.Schedule, spec Spec, run *schedulesv1.RunInput, note string) (specHash string, err error)
	// SpecHash describes the Temporal Schedule and returns the hash of its
	// spec, action and policies as Temporal holds them now: any change to
	// when it runs or what it runs changes the hash. ErrNotFound when the
	// schedule does not exist.
	SpecHash(ctx context.Context, temporalID string) (string, error)
	// SetPaused pauses or unpauses the Temporal Schedule with a note, and
	// returns once describing it shows the new state.
	SetPaused(ctx context.Context, temporalID string, paused bool, note string) error
	// DeleteSchedule deletes the Temporal Schedule; one that does not exist
	// is not an error.
	DeleteSchedule(ctx context.Context, temporalID string) error
	// StartApproval starts the approval workflow; one already started under
	// workflowID is kept.
	StartApproval(ctx context.Context, workflowID string, in *schedulesv1.ApprovalInput) error
	// Approve and Deny send the decision to the approval workflow, wait
	// until it has been carried out and return the workflow's sentence
	// about it. When the workflow refuses it (already decided, the spec
	// changed, the request closed), the error wraps ErrDecisionRefused and
	// says why.
	Approve(ctx context.Context, workflowID string, u *schedulesv1.ApproveUpdate) (string, error)
	Deny(ctx context.Context, workflowID string, u *schedulesv1.DenyUpdate) (string, error)
	// WithdrawApproval cancels the approval workflow; one that has ended is
	// not an error.
	WithdrawApproval(ctx context.Context, workflowID string) error
}

// ErrDecisionRefused marks a decision the approval workflow refused.
var ErrDecisionRefused = errors.New("decision refused")

// ErrSuperseded marks a change of a schedule that another change overtook.
var ErrSuperseded = errors.New("superseded by another change")
