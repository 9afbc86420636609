package reputation

import (
	"math"
	"time"

	"github.com/toolmesh/toolmesh/internal/toolcall"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

// Formula names the score's formula and its version; a change of what counts
// or of a weight is a new version, so attestations say how they were
// computed. Attestations issued under an earlier formula (FormulaV1: audit
// records only; FormulaV2: call outcomes without the work done) still
// verify, as their signature covers the score.
const (
	Formula   = "toolmesh-reputation/v3"
	FormulaV2 = "toolmesh-reputation/v2"
	FormulaV1 = "toolmesh-reputation/v1"
)

// The weights and caps of Formula (docs/reputation.md). With v the volume,
// min(calls, CallsVolume)/CallsVolume, a score is
//
//	40 × v × ok/(calls − failed)        success: what the agent asked went through
//	+ 20 × v × (1 − refused/calls)      care: few calls refused for its own mistakes
//	+ 10 × v                            volume
//	+ 10 × min(work, WorkCap)/WorkCap   work done: tasks completed, messages answered
//	+ 10 × min(active_days, window days)/window days
//	+ 5 × min(admin_calls, AdminCap)/AdminCap
//	+ 5 × min(tools, ToolsCap)/ToolsCap
//
// rounded to the nearest integer, 0 to 100. Failures that are not the
// agent's (a service unavailable, an internal error) lower nothing.
const (
	SuccessWeight = 40
	CareWeight    = 20
	VolumeWeight  = 10
	WorkWeight    = 10
	DaysWeight    = 10
	AdminWeight   = 5
	ToolsWeight   = 5
	CallsVolume   = 100
	WorkCap       = 20
	AdminCap      = 50
	ToolsCap      = 10
)

// The accomplishments (toolmesh.tool.v1.Accomplishment) the formula counts
// as work done; the tasks and messages contracts declare them.
const (
	TaskCompleted   = "task_completed"
	MessageAnswered = "message_answered"
)

// refusedCodes are the domain codes of calls refused for the caller's own
// mistake; failedCodes those of calls that failed through no fault of the
// caller. Any other code but "ok" (declined: the user said no) is neither.
var (
	refusedCodes = map[string]bool{
		toolcall.CodeInvalidArgument: true, toolcall.CodeGuardrailViolated: true, toolcall.CodePermissionDenied: true,
		toolcall.CodeUnauthenticated: true, toolcall.CodeNotFound: true, toolcall.CodeConflict: true,
		toolcall.CodeRateLimited: true, toolcall.CodeReadOnly: true,
	}
	failedCodes = map[string]bool{
		toolcall.CodeUnavailable: true, toolcall.CodeDeadlineExceeded: true, toolcall.CodeInternal: true,
		toolcall.CodeNotSupported: true, toolcall.CodeCapabilityGap: true,
	}
)

// Window defaults and bounds, in days.
const (
	DefaultWindowDays = 30
	MaxWindowDays     = 365
)

// MaxRecords bounds the audit records read for one score: the newest are
// read, and Components.truncated says the window held more.
const MaxRecords = 5000

// Compute scores one agent over a window of days from its audit records
// (those whose actor is the agent, in the window, up to the audit head the
// score names) and the summary of its call outcomes (up to the position the
// score names). It is a pure function of both, so anyone who reads them back
// gets the same score.
func Compute(records []*auditv1.Record, outcomes *auditv1.SummarizeOutcomesResponse, days int, truncated bool) (int32, *reputationv1.Components) {
	c := &reputationv1.Components{RecordsRead: int64(len(records)), Truncated: truncated, OutcomesThrough: outcomes.GetThrough()}
	activeDays := map[string]bool{}
	tools := map[string]bool{}
	for _, r := range records {
		switch r.GetOutcome() {
		case auditv1.Outcome_OUTCOME_SUCCEEDED:
			c.AdminCalls++
		case auditv1.Outcome_OUTCOME_REPLAYED:
			c.Replays++
		}
		activeDays[r.GetTime().AsTime().UTC().Format(time.DateOnly)] = true
		tools[r.GetTool()] = true
	}
	for _, n := range outcomes.GetCounts() {
		tools[n.GetTool()] = true
		c.Calls += n.GetCount()
		switch code := n.GetDomainCode(); {
		case code == "ok":
			c.OkCalls += n.GetCount()
			switch n.GetAccomplishment() {
			case TaskCompleted:
				c.TasksCompleted += n.GetCount()
			case MessageAnswered:
				c.MessagesAnswered += n.GetCount()
			}
		case refusedCodes[code]:
			c.RefusedCalls += n.GetCount()
		case failedCodes[code]:
			c.FailedCalls += n.GetCount()
		}
	}
	// Outcomes cover admin calls too (since they were recorded), records
	// the time before: of the two counts of active days the larger stands.
	c.ActiveDays = max(int32(len(activeDays)), outcomes.GetActiveDays())
	c.Tools = int32(len(tools))
	if days < 1 {
		days = 1
	}
	volume := ratio(c.Calls, CallsVolume)
	var success, care float64
	if judged := c.Calls - c.FailedCalls; judged > 0 {
		success = float64(c.OkCalls) / float64(judged)
	}
	if c.Calls > 0 {
		care = 1 - float64(c.RefusedCalls)/float64(c.Calls)
	}
	score := SuccessWeight*volume*success + CareWeight*volume*care + VolumeWeight*volume +
		WorkWeight*ratio(c.TasksCompleted+c.MessagesAnswered, WorkCap) +
		AdminWeight*ratio(c.AdminCalls, AdminCap) +
		DaysWeight*ratio(int64(c.ActiveDays), int64(days)) +
		ToolsWeight*ratio(int64(c.Tools), ToolsCap)
	return int32(math.Round(score)), c
}

// ratio is min(n, limit)/limit.
func ratio(n, limit int64) float64 {
	return float64(min(n, limit)) / float64(limit)
}
