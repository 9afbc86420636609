package workflows_test

import (
	"context"
	"testing"

	"github.com/toolmesh/toolmesh/internal/mesh"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	workflows "github.com/toolmesh/toolmesh/workers/workflows"
)

// askRecorder is an OwnerService that keeps the asks it is sent.
type askRecorder struct {
	ownerv1connect.OwnerServiceClient
	asks  []*ownerv1.AskRequest
	agent string
}

func (r *askRecorder) Ask(ctx context.Context, req *ownerv1.AskRequest) (*ownerv1.AskResponse, error) {
	r.asks = append(r.asks, req)
	r.agent = mesh.FromContext(ctx).Caller.Agent
	return &ownerv1.AskResponse{Ask: &ownerv1.Ask{AskId: "ask_01hzy3d5q8w9x7v6t5s4r3p2n1", Status: ownerv1.AskStatus_ASK_STATUS_PENDING, Run: req.GetRun()}}, nil
}

// The approval's ask names the run it belongs to, so the owner sees the
// run beside the question.
func TestApprovalAskNamesItsRun(t *testing.T) {
	rec := &askRecorder{}
	a := &workflows.Activities{Owner: rec}
	const run = "run_01hzy3d5q8w9x7v6t5s4r3p2n1"
	out, err := a.Ask(t.Context(), &workflowsv1.ApprovalInput{RunId: run, NodeId: "approve", Question: "Deploy?",
		TimeoutSeconds: 600, Caller: &callsv1.Caller{Subject: "alice", Agent: "agent-a"}, IdempotencyKey: workflows.IdempotencyKey(run, "approve")})
	if err != nil || out.GetStatus() != "pending" {
		t.Fatalf("Ask = %v, %v; want pending", out, err)
	}
	if len(rec.asks) != 1 || rec.asks[0].GetRun() != run || rec.agent != "agent-a" {
		t.Fatalf("owner was asked %v as %q; want one ask naming run %s as agent-a", rec.asks, rec.agent, run)
	}
}
