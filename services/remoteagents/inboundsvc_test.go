package remoteagents_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	"github.com/toolmesh/toolmesh/services/remoteagents"
	"github.com/toolmesh/toolmesh/services/remoteagents/remoteagentsstore"
)

// directory is an agents directory with bob (active) and sleepy (paused);
// it records who asked.
type directory struct {
	agentsv1connect.UnimplementedAgentsServiceHandler
	askedBy []string
}

func (d *directory) Get(ctx context.Context, req *agentsv1.GetRequest) (*agentsv1.GetResponse, error) {
	d.askedBy = append(d.askedBy, mesh.FromContext(ctx).Caller.Agent)
	switch req.GetAgentId() {
	case "bob":
		return &agentsv1.GetResponse{Agent: &agentsv1.Agent{Id: "bob", DisplayName: "Bob", Description: "Books trips.", Status: agentsv1.AgentStatus_AGENT_STATUS_ACTIVE}}, nil
	case "sleepy":
		return &agentsv1.GetResponse{Agent: &agentsv1.Agent{Id: "sleepy", Status: agentsv1.AgentStatus_AGENT_STATUS_PAUSED}}, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s not found", req.GetAgentId()))
}

// List answers bob for the active filter, as the directory does: it
// filters by status itself.
func (d *directory) List(ctx context.Context, req *agentsv1.ListRequest) (*agentsv1.ListResponse, error) {
	d.askedBy = append(d.askedBy, mesh.FromContext(ctx).Caller.Agent)
	all := []*agentsv1.Agent{
		{Id: "bob", DisplayName: "Bob", Description: "Books trips.", Status: agentsv1.AgentStatus_AGENT_STATUS_ACTIVE},
		{Id: "sleepy", Status: agentsv1.AgentStatus_AGENT_STATUS_PAUSED},
	}
	res := &agentsv1.ListResponse{Page: &pagev1.Page{Offset: req.GetOffset(), Limit: req.GetLimit()}}
	for _, a := range all {
		if req.GetStatus() == agentsv1.AgentStatus_AGENT_STATUS_UNSPECIFIED || a.GetStatus() == req.GetStatus() {
			res.Agents = append(res.Agents, a)
		}
	}
	res.Page.Total = int32(len(res.Agents))
	return res, nil
}

func TestInboundListAgentsIsTheActiveAgents(t *testing.T) {
	f := startDoor(t)
	res, err := f.door.ListAgents(remote("toolmesh-a2a", 0), &inboundv1.ListAgentsRequest{Limit: 200})
	if err != nil || len(res.GetAgents()) != 1 || res.GetAgents()[0].GetAgentId() != "bob" || res.GetAgents()[0].GetDisplayName() != "Bob" || res.GetPage().GetTotal() != 1 {
		t.Fatalf("ListAgents = %v, %v; want bob alone (sleepy is paused)", res, err)
	}
	if len(f.dir.askedBy) != 1 || f.dir.askedBy[0] != "toolmesh-a2a" {
		t.Errorf("the directory was asked by %v, want the door", f.dir.askedBy)
	}
	if _, err := f.door.ListAgents(at("mallory", 0), &inboundv1.ListAgentsRequest{}); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent asking: %v, want permission_denied", err)
	}
}

// TestInboundServiceIsTheA2ADoorsContract: the A2A door's contract
// (toolmesh.inbound.v1) serves the active agents of the directory, asked as
// the door, and the inbound tasks RemoteAgentsService shows, for the mesh's
// service role only.
// doorFixture is the service with its InboundService, over SQLite, with
// fake workflows, a fake messages service and the directory.
type doorFixture struct {
	door     inboundv1connect.InboundServiceClient
	twin     remoteagentsv1connect.RemoteAgentsServiceClient
	wf       *fakeEngine
	messages *fakeMessages
	dir      *directory
}

func startDoor(t *testing.T) *doorFixture {
	t.Helper()
	st, err := remoteagentsstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "remoteagents.db")))
	if err != nil {
		t.Fatal(err)
	}
	f := &doorFixture{wf: newFakeEngine(), messages: &fakeMessages{}, dir: &directory{}}
	msgs := servertest.Start(t, servertestService(f.messages))
	agents := servertest.Start(t, server.Register(agentsv1connect.AgentsServiceName, agentsv1connect.AgentsServiceHandler(f.dir), agentsv1connect.NewAgentsServiceHandler, nil))
	svc := remoteagents.New(st, remoteagents.Config{
		Engine: f.wf, Egress: loopback,
		Messages: messagesv1connect.NewMessagesServiceClient(msgs.Client(), msgs.URL,
			connect.WithInterceptors(mesh.NewForwardingInterceptor(), remoteagents.NewIdempotencyInterceptor())),
		Agents: agentsv1connect.NewAgentsServiceClient(agents.Client(), agents.URL, connect.WithInterceptors(mesh.NewForwardingInterceptor())),
	})
	srv := servertest.Start(t, svc.Registration(), svc.Inbound().Registration())
	f.door = inboundv1connect.NewInboundServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	f.twin = remoteagentsv1connect.NewRemoteAgentsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	return f
}

func TestInboundServiceIsTheA2ADoorsContract(t *testing.T) {
	f := startDoor(t)
	door, twin, dir := f.door, f.twin, f.dir

	self := remote("toolmesh-a2a", 0)
	if res, err := door.GetAgent(self, &inboundv1.GetAgentRequest{AgentId: "bob"}); err != nil ||
		res.GetAgent().GetAgentId() != "bob" || res.GetAgent().GetDisplayName() != "Bob" || res.GetAgent().GetDescription() != "Books trips." {
		t.Errorf("GetAgent bob = %v, %v; want bob's card facts", res, err)
	}
	for _, id := range []string{"sleepy", "nobody"} {
		if _, err := door.GetAgent(self, &inboundv1.GetAgentRequest{AgentId: id}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("GetAgent %s = %v, want not_found (paused or unknown agents are not served)", id, err)
		}
	}
	if len(dir.askedBy) != 3 || dir.askedBy[0] != "toolmesh-a2a" {
		t.Errorf("the directory was asked by %v, want the door each time", dir.askedBy)
	}
	if _, err := door.GetAgent(at("mallory", 0), &inboundv1.GetAgentRequest{AgentId: "bob"}); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent asking: %v, want permission_denied", err)
	}

	// A delivery through the contract is the task RemoteAgentsService shows.
	sent, err := door.DeliverInbound(remote("a2a-alice", 1), &inboundv1.DeliverInboundRequest{AgentId: "bob", Text: "hello bob", A2AMessageId: "m-1"})
	if err != nil || sent.GetInbound().GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_WORKING || sent.GetInbound().GetSender() != "a2a-alice" {
		t.Fatalf("DeliverInbound = %v, %v; want a working task from a2a-alice", sent, err)
	}
	shown, err := twin.GetInbound(remote("a2a-alice", 0), &remoteagentsv1.GetInboundRequest{TaskId: sent.GetInbound().GetTaskId()})
	if err != nil || shown.GetInbound().GetMessageId() != sent.GetInbound().GetMessageId() || shown.GetInbound().GetDepth() != sent.GetInbound().GetDepth() {
		t.Errorf("RemoteAgentsService.GetInbound = %v, %v; want the task the contract opened", shown, err)
	}
	cancelled, err := door.CancelInbound(remote("a2a-alice", 0), &inboundv1.CancelInboundRequest{TaskId: sent.GetInbound().GetTaskId()})
	if err != nil || cancelled.GetInbound().GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED {
		t.Errorf("CancelInbound = %v, %v; want cancelled", cancelled, err)
	}
	if _, err := door.GetInbound(remote("a2a-carol", 0), &inboundv1.GetInboundRequest{TaskId: sent.GetInbound().GetTaskId()}); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("another sender's task: %v, want not_found", err)
	}
}
