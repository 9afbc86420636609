package reputation

import (
	"math"
	"time"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

// Formula names the score's formula and its version; a change of what counts
// or of a weight is a new version, so attestations say how they were
// computed.
const Formula = "toolmesh-reputation/v1"

// The weights and caps of Formula (docs/reputation.md): a score is
//
//	60 × min(admin_calls, CallsCap)/CallsCap
//	+ 30 × min(active_days, window days)/window days
//	+ 10 × min(tools, ToolsCap)/ToolsCap
//
// rounded to the nearest integer, 0 to 100.
const (
	CallsWeight = 60
	DaysWeight  = 30
	ToolsWeight = 10
	CallsCap    = 50
	ToolsCap    = 5
)

// Window defaults and bounds, in days.
const (
	DefaultWindowDays = 30
	MaxWindowDays     = 365
)

// MaxRecords bounds the audit records read for one score: the newest are
// read, and Components.truncated says the window held more.
const MaxRecords = 5000

// Compute scores the audit records of one agent over a window of days:
// records are those whose actor is the agent, in the window and up to the
// audit head the score names. It is a pure function of the records, so
// anyone who reads them back (audit_list) gets the same score.
func Compute(records []*auditv1.Record, days int, truncated bool) (int32, *reputationv1.Components) {
	c := &reputationv1.Components{RecordsRead: int64(len(records)), Truncated: truncated}
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
	c.ActiveDays, c.Tools = int32(len(activeDays)), int32(len(tools))
	if days < 1 {
		days = 1
	}
	score := CallsWeight*ratio(c.AdminCalls, CallsCap) +
		DaysWeight*ratio(int64(c.ActiveDays), int64(days)) +
		ToolsWeight*ratio(int64(c.Tools), ToolsCap)
	return int32(math.Round(score)), c
}

// ratio is min(n, limit)/limit.
func ratio(n, limit int64) float64 {
	return float64(min(n, limit)) / float64(limit)
}
