package console

import "testing"

// TestFormRefusalNamesWhatTheFormLeftOut: the edge's guardrail refusals are
// said as the form names its fields; any other refusal is the edge's own.
func TestFormRefusalNamesWhatTheFormLeftOut(t *testing.T) {
	for _, c := range []struct {
		violation, reason, want string
	}{
		{"missing_confirm", "weekly report", "Tick “I confirm this decision” to go ahead."},
		{"missing_confirm", " ", "Tick “I confirm this decision” and give a reason (it is recorded in the audit trail)."},
		{"missing_reason", "", "Give a reason: it is recorded in the audit trail."},
		{"", "weekly report", "schedule sch_1 is not pending"},
	} {
		env := envelope{Status: "error", Violation: c.violation, Message: "schedule sch_1 is not pending"}
		if got := formRefusal(env, "I confirm this decision", c.reason); got != c.want {
			t.Errorf("formRefusal(%q, reason %q) = %q, want %q", c.violation, c.reason, got, c.want)
		}
	}
}
