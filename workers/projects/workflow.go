// Package projects holds the workflow and activity of the "projects" task
// queue:
//
//   - HealthWorkflow (project-health/<agent>/<project>) takes a health
//     snapshot of a project at once and then one each health interval,
//     each through ProjectsService.RecordHealth under a key of its own, so
//     a retried activity takes one snapshot. It ends when the project is
//     archived (the projects service cancels it, or the next snapshot
//     finds it archived) or gone, and continues as new every
//     SnapshotsPerRun snapshots to keep its history short.
//
// Names and inputs are the protobuf contracts in
// proto/toolmesh/projects/v1/health_workflow.proto.
package projects

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	projectsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/projects/v1"
)

// healthContract is the contract this package implements.
var healthContract = workflowcontract.WorkflowOf(&projectsv1.HealthInput{})

// SnapshotsPerRun is how many snapshots one run takes before it continues
// as new.
const SnapshotsPerRun = 100

// DefaultInterval is the time between snapshots when the input names none
// and no snapshot has named one yet.
const DefaultInterval = 24 * time.Hour

// ErrProjectGone is the error type of a RecordHealth the service refused
// for good (the project does not exist): the workflow ends.
const ErrProjectGone = "ProjectGone"

// SnapshotAttempts is how many times a snapshot is tried (over about 25
// minutes) before it is skipped until the next interval.
const SnapshotAttempts = 10

// snapshotOptions run one snapshot: a slow one (a clone refreshed, go vet)
// may take minutes; a failing one is retried SnapshotAttempts times, then
// skipped.
var snapshotOptions = workflow.ActivityOptions{
	StartToCloseTimeout:    15 * time.Minute,
	ScheduleToCloseTimeout: 2 * time.Hour,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval: 10 * time.Second, BackoffCoefficient: 2, MaximumInterval: 5 * time.Minute,
		MaximumAttempts: SnapshotAttempts, NonRetryableErrorTypes: []string{ErrProjectGone},
	},
}

// HealthWorkflow records the health of in's project until it is archived.
func HealthWorkflow(ctx workflow.Context, in *projectsv1.HealthInput) error {
	log := workflow.GetLogger(ctx)
	interval := in.GetInterval().AsDuration()
	if interval <= 0 {
		interval = DefaultInterval
	}
	ctx = workflow.WithActivityOptions(ctx, snapshotOptions)
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	for range SnapshotsPerRun {
		req := &projectsv1.RecordHealthRequest{ProjectId: in.GetProjectId(), Key: fmt.Sprintf("%s/%d", id, workflow.Now(ctx).UnixMilli())}
		var res projectsv1.RecordHealthResponse
		err := workflow.ExecuteActivity(ctx, ActivityRecordHealth, req).Get(ctx, &res)
		var appErr *temporal.ApplicationError
		switch {
		case errors.As(err, &appErr) && appErr.Type() == ErrProjectGone:
			log.Info("project gone: health workflow ends", "project", in.GetProjectId())
			return nil
		case temporal.IsCanceledError(err):
			return err
		case err != nil:
			log.Warn("health snapshot failed; the next is due after the interval", "project", in.GetProjectId(), "error", err)
		case res.GetStatus() != projectsv1.ProjectStatus_PROJECT_STATUS_ACTIVE:
			log.Info("project archived: health workflow ends", "project", in.GetProjectId())
			return nil
		case res.GetNextAfter().AsDuration() > 0:
			interval = res.GetNextAfter().AsDuration()
		}
		if err := workflow.Sleep(ctx, interval); err != nil {
			return err // cancelled: the project was archived
		}
	}
	next := &projectsv1.HealthInput{ProjectId: in.GetProjectId(), AgentId: in.GetAgentId(), Interval: durationpb.New(interval)}
	return workflow.NewContinueAsNewError(ctx, healthContract.Name, next)
}
