package protoenum_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/protoenum"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
)

func TestWord(t *testing.T) {
	for _, tc := range []struct {
		e    protoreflect.Enum
		want string
	}{
		{agentsv1.AgentStatus_AGENT_STATUS_ACTIVE, "active"},
		{agentsv1.AgentStatus_AGENT_STATUS_UNSPECIFIED, "unspecified"},
		// Words of more than one part keep their underscores.
		{creditsv1.ConfigKey_CONFIG_KEY_MAX_GRANT_AMOUNT, "max_grant_amount"},
		{auditv1.Problem_PROBLEM_OUT_OF_ORDER, "out_of_order"},
		// The prefix is the enum's own, not a shorter one that ends it.
		{auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_UNKNOWN_KEY, "unknown_key"},
		{agentsv1.AgentStatus(42), "42"},
	} {
		if got := protoenum.Word(tc.e); got != tc.want {
			t.Errorf("Word(%v) = %q, want %q", tc.e, got, tc.want)
		}
	}
}
