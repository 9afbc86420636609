package reputation_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/services/reputation"
)

var day0 = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

func record(tool string, at time.Time, outcome auditv1.Outcome) *auditv1.Record {
	return &auditv1.Record{Tool: tool, Time: timestamppb.New(at), Outcome: outcome}
}

func outcomes(activeDays int32, counts ...*auditv1.OutcomeCount) *auditv1.SummarizeOutcomesResponse {
	return &auditv1.SummarizeOutcomesResponse{Counts: counts, Through: 500, ActiveDays: activeDays}
}

func count(tool, code string, n int64) *auditv1.OutcomeCount {
	return &auditv1.OutcomeCount{Tool: tool, DomainCode: code, Count: n}
}

// achieved counts n successful calls of tool that achieved accomplishment.
func achieved(tool, accomplishment string, n int64) *auditv1.OutcomeCount {
	return &auditv1.OutcomeCount{Tool: tool, DomainCode: "ok", Accomplishment: accomplishment, Count: n}
}

// TestScoreFollowsTheFormula checks the documented formula: the weights,
// the caps, that refusals lower the score and failures that are not the
// agent's do not, and that replays change nothing but their count.
func TestScoreFollowsTheFormula(t *testing.T) {
	ok, replayed := auditv1.Outcome_OUTCOME_SUCCEEDED, auditv1.Outcome_OUTCOME_REPLAYED
	var ten []*auditv1.Record
	for i := range 10 {
		tool := "credits_grant"
		if i%2 == 0 {
			tool = "agents_register"
		}
		ten = append(ten, record(tool, day0.Add(time.Duration(i%3)*24*time.Hour), ok))
	}
	var many []*auditv1.Record
	for i := range 80 {
		many = append(many, record([]string{"a_b", "c_d", "e_f", "g_h", "i_j", "k_l", "m_n"}[i%7], day0.Add(time.Duration(i)*12*time.Hour), ok))
	}
	for _, tc := range []struct {
		name      string
		records   []*auditv1.Record
		outcomes  *auditv1.SummarizeOutcomesResponse
		days      int
		score     int32
		want      *reputationv1.Components
		truncated bool
	}{
		{name: "nothing", days: 30, score: 0, want: &reputationv1.Components{}},
		// Records from before outcomes were kept: 5×10/50 + 10×3/30 + 5×2/10 = 1 + 1 + 1.
		{name: "ten admin records on three days with two tools", records: ten, days: 30, score: 3,
			want: &reputationv1.Components{AdminCalls: 10, ActiveDays: 3, Tools: 2, RecordsRead: 10}},
		{name: "a replay counts for nothing", records: append(ten[:10:10], record("credits_grant", day0, replayed)), days: 30, score: 3,
			want: &reputationv1.Components{AdminCalls: 10, Replays: 1, ActiveDays: 3, Tools: 2, RecordsRead: 11}},
		// 100 ordinary calls, 5 refused, on one day with two tools:
		// 40×95/100 + 20×(1−5/100) + 10 + 10×1/30 + 5×2/10 = 38 + 19 + 10 + 0.33 + 1.
		{name: "a hundred calls, a few refused", days: 30, score: 68,
			outcomes: outcomes(1, count("memory_save", "invalid_argument", 5), count("memory_save", "ok", 35), count("tasks_create", "ok", 60)),
			want:     &reputationv1.Components{Calls: 100, OkCalls: 95, RefusedCalls: 5, ActiveDays: 1, Tools: 2, OutcomesThrough: 500}},
		// A careless agent: half its calls refused. 40×50/100 + 20×0.5 + 10 + 0.33 + 1.
		{name: "half refused", days: 30, score: 41,
			outcomes: outcomes(1, count("memory_save", "invalid_argument", 50), count("tasks_create", "ok", 50)),
			want:     &reputationv1.Components{Calls: 100, OkCalls: 50, RefusedCalls: 50, ActiveDays: 1, Tools: 2, OutcomesThrough: 500}},
		// Failures that are not the agent's lower nothing: 40×60/60 + 20 + 10 + 0.33 + 1.
		{name: "failures are not the agent's", days: 30, score: 71,
			outcomes: outcomes(1, count("search_web", "unavailable", 40), count("tasks_create", "ok", 60)),
			want:     &reputationv1.Components{Calls: 100, OkCalls: 60, FailedCalls: 40, ActiveDays: 1, Tools: 2, OutcomesThrough: 500}},
		// A user's "no" is neither a success nor a refusal: 40×10/11 × 11/100 + 20×11/100 + 10×11/100 + ...
		{name: "declined", days: 30, score: 8,
			outcomes: outcomes(1, count("owner_ask", "declined", 1), count("owner_ask", "ok", 10)),
			want:     &reputationv1.Components{Calls: 11, OkCalls: 10, ActiveDays: 1, Tools: 1, OutcomesThrough: 500}},
		// Work done: 8 work tasks completed and 2 messages answered among
		// 100 calls. 40 + 20 + 10 + 10×10/20 + 10×1/30 + 5×3/10.
		{name: "work done", days: 30, score: 77,
			outcomes: outcomes(1, count("tasks_create", "ok", 88), count("tasks_update_status", "ok", 2),
				achieved("tasks_update_status", "task_completed", 8), achieved("messages_send", "message_answered", 2)),
			want: &reputationv1.Components{Calls: 100, OkCalls: 100, TasksCompleted: 8, MessagesAnswered: 2, ActiveDays: 1, Tools: 3, OutcomesThrough: 500}},
		// Every component at or past its cap: 200 calls, 20 pieces of work,
		// 80 admin calls, 40 days in a 30-day window, 13 tools.
		{name: "caps", records: many, days: 30, score: 100, truncated: true,
			outcomes: outcomes(40, count("tasks_create", "ok", 177), achieved("tasks_update_status", "task_completed", 15),
				achieved("messages_send", "message_answered", 5), count("o_p", "ok", 1), count("q_r", "ok", 1), count("s_t", "ok", 1)),
			want: &reputationv1.Components{AdminCalls: 80, ActiveDays: 40, Tools: 13, RecordsRead: 80, Truncated: true, Calls: 200, OkCalls: 200,
				TasksCompleted: 15, MessagesAnswered: 5, OutcomesThrough: 500}},
		// A shorter window weighs each day more: 1 + 10×3/7 + 1.
		{name: "a week's window", records: ten, days: 7, score: 6,
			want: &reputationv1.Components{AdminCalls: 10, ActiveDays: 3, Tools: 2, RecordsRead: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			score, comps := reputation.Compute(tc.records, tc.outcomes, tc.days, tc.truncated)
			if score != tc.score {
				t.Errorf("score = %d, want %d", score, tc.score)
			}
			if diff := cmp.Diff(tc.want, comps, protocmp.Transform()); diff != "" {
				t.Errorf("components (-want +got):\n%s", diff)
			}
		})
	}
}
