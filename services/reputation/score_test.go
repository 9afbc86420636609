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

// TestScoreFollowsTheFormula checks the documented formula: the weights,
// the caps, and that replays change nothing but their count.
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
		days      int
		score     int32
		want      *reputationv1.Components
		truncated bool
	}{
		{name: "no records", days: 30, score: 0, want: &reputationv1.Components{}},
		// 60×10/50 + 30×3/30 + 10×2/5 = 12 + 3 + 4
		{name: "ten calls on three days with two tools", records: ten, days: 30, score: 19,
			want: &reputationv1.Components{AdminCalls: 10, ActiveDays: 3, Tools: 2, RecordsRead: 10}},
		{name: "a replay counts for nothing", records: append(ten[:10:10], record("credits_grant", day0, replayed)), days: 30, score: 19,
			want: &reputationv1.Components{AdminCalls: 10, Replays: 1, ActiveDays: 3, Tools: 2, RecordsRead: 11}},
		// Every component at or past its cap: 80 calls, 40 days in a
		// 30-day window, 7 tools.
		{name: "caps", records: many, days: 30, score: 100, truncated: true,
			want: &reputationv1.Components{AdminCalls: 80, ActiveDays: 40, Tools: 7, RecordsRead: 80, Truncated: true}},
		// A shorter window weighs each day more: 60×10/50 + 30×3/7 + 4.
		{name: "a week's window", records: ten, days: 7, score: 29,
			want: &reputationv1.Components{AdminCalls: 10, ActiveDays: 3, Tools: 2, RecordsRead: 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			score, comps := reputation.Compute(tc.records, tc.days, tc.truncated)
			if score != tc.score {
				t.Errorf("score = %d, want %d", score, tc.score)
			}
			if diff := cmp.Diff(tc.want, comps, protocmp.Transform()); diff != "" {
				t.Errorf("components (-want +got):\n%s", diff)
			}
		})
	}
}
