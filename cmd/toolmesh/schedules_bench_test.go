package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
)

// BenchmarkApprovalToFirstRun measures, against a dev server as
// internal/temporaldev configures it, how long after an approval the first
// run of a 1-second interval schedule has made its tool call and is listed
// in schedules_executions. The first run is due at the next whole second,
// so the figures are split up:
//
//   - approve-ms: the Approve call (update, hash check, unpause, confirm);
//   - first-run-ms: approval to the first run listed as ended;
//   - due-to-started-ms: the run's due time to the start of its workflow
//     (Temporal's scheduler);
//   - started-to-recorded-ms: the run workflow's start to its result
//     recorded (the worker: record start, tool call, record result);
//   - overhead-ms: first-run-ms minus the wait for the due time.
//
// go test ./cmd/toolmesh -run '^$' -bench ApprovalToFirstRun -benchtime 20x
func BenchmarkApprovalToFirstRun(b *testing.B) {
	m := startSchedulesMesh(b, "1s", false)
	ctx := context.Background()
	var approveD, firstD, dueToStart, startToRecorded, overhead []time.Duration
	for i := 0; b.Loop(); i++ {
		sch := createTickSchedule(b, m, "bench", fmt.Sprintf("bench %d", i), 1)
		// Approve at a random point of the second, not in step with the
		// previous run.
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
		t0 := time.Now()
		if _, err := m.schedules.Approve(ownerCtx(ctx), &schedulesv1.ApproveRequest{ScheduleId: sch.GetId()}); err != nil {
			b.Fatal(err)
		}
		approveD = append(approveD, time.Since(t0))
		var run *schedulesv1.Execution
		for run == nil {
			if list := ended(executions(b, m, "bench", sch.GetId())); len(list) > 0 {
				run = list[len(list)-1]
			} else {
				time.Sleep(2 * time.Millisecond)
			}
		}
		seen := time.Since(t0)
		if _, err := m.schedules.Delete(servertest.As(ctx, "bench"), &schedulesv1.DeleteRequest{ScheduleId: sch.GetId()}); err != nil {
			b.Fatal(err)
		}
		d, err := m.temporal.DescribeWorkflow(ctx, run.GetRunId(), "")
		if err != nil {
			b.Fatal(err)
		}
		due := run.GetScheduledTime().AsTime()
		started := d.RawResponse.GetWorkflowExecutionInfo().GetStartTime().AsTime()
		firstD = append(firstD, seen)
		dueToStart = append(dueToStart, started.Sub(due))
		startToRecorded = append(startToRecorded, run.GetEndTime().AsTime().Sub(started))
		overhead = append(overhead, seen-max(0, due.Sub(t0)))
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"approve", approveD}, {"first-run", firstD}, {"due-to-started", dueToStart}, {"started-to-recorded", startToRecorded}, {"overhead", overhead}} {
		slices.Sort(m.d)
		b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds())/1000, m.name+"-p50-ms")
		b.ReportMetric(float64(m.d[len(m.d)-1].Microseconds())/1000, m.name+"-max-ms")
	}
}
