package remoteagents_test

import (
	"context"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// answer is bob answering a task in its thread, as the messages service
// stores it.
func (f *doorFixture) answer(t *testing.T, in *inboundv1.Inbound, text string) {
	t.Helper()
	if _, err := f.messages.Send(mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "bob", Depth: 1}}),
		sendReq(in.GetSender(), in.GetThreadId(), text)); err != nil {
		t.Fatal(err)
	}
}

func (f *doorFixture) deliver(t *testing.T, sender, msgID string) *inboundv1.Inbound {
	t.Helper()
	res, err := f.door.DeliverInbound(remote(sender, 0), &inboundv1.DeliverInboundRequest{AgentId: "bob", Text: "hello " + msgID, A2AMessageId: msgID})
	if err != nil {
		t.Fatal(err)
	}
	return res.GetInbound()
}

// TestListInboundIsTheSendersOwn: a sender lists its own tasks to one
// agent, newest change first, a page at a time, each up to date.
func TestListInboundIsTheSendersOwn(t *testing.T) {
	f := startDoor(t)
	var mine []*inboundv1.Inbound
	for i := range 3 {
		mine = append(mine, f.deliver(t, "a2a-alice", fmt.Sprintf("m-%d", i)))
	}
	f.deliver(t, "a2a-carol", "m-carol")
	f.answer(t, mine[0], "done")

	res, err := f.door.ListInbound(remote("a2a-alice", 0), &inboundv1.ListInboundRequest{AgentId: "bob", PageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.GetTotalSize() != 3 || len(res.GetInbounds()) != 2 || res.GetNextPageToken() == "" {
		t.Fatalf("first page = %v, want 2 of alice's 3 tasks and a next page", res)
	}
	next, err := f.door.ListInbound(remote("a2a-alice", 0), &inboundv1.ListInboundRequest{AgentId: "bob", PageSize: 2, PageToken: res.GetNextPageToken()})
	if err != nil {
		t.Fatal(err)
	}
	got := append(res.GetInbounds(), next.GetInbounds()...)
	if len(got) != 3 || next.GetNextPageToken() != "" {
		t.Fatalf("pages hold %d tasks (next token %q), want all 3 and no further page", len(got), next.GetNextPageToken())
	}
	seen := map[string]inboundv1.InboundStatus{}
	for _, in := range got {
		if in.GetSender() != "a2a-alice" {
			t.Errorf("listed %v, someone else's task", in)
		}
		seen[in.GetTaskId()] = in.GetStatus()
	}
	// The answered task is completed: listing brought it up to date.
	if seen[mine[0].GetTaskId()] != inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED || len(seen) != 3 {
		t.Errorf("statuses %v, want %s completed among 3", seen, mine[0].GetTaskId())
	}
	working, err := f.door.ListInbound(remote("a2a-alice", 0), &inboundv1.ListInboundRequest{AgentId: "bob", Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING})
	if err != nil || working.GetTotalSize() != 2 {
		t.Errorf("working tasks = %v, %v; want 2", working, err)
	}
	if _, err := f.door.ListInbound(remote("a2a-alice", 0), &inboundv1.ListInboundRequest{AgentId: "bob", PageToken: "bm90IGEgdG9rZW4"}); servertest.Code(t, err) != connect.CodeInvalidArgument {
		t.Errorf("a forged page token: %v, want invalid_argument", err)
	}
}

// TestInboundEventsWaitForTheAnswer: a reader of a task's events after its
// delivery waits, and gets the answer and the completed status as soon as
// the recipient answers; reading from the start replays the whole log.
func TestInboundEventsWaitForTheAnswer(t *testing.T) {
	f := startDoor(t)
	in := f.deliver(t, "a2a-alice", "m-1")
	if in.GetVersion() != 1 {
		t.Fatalf("a delivered task has version %d, want 1", in.GetVersion())
	}
	type answer struct {
		res *inboundv1.ListInboundEventsResponse
		err error
	}
	got := make(chan answer, 1)
	go func() {
		res, err := f.door.ListInboundEvents(remote("a2a-alice", 0), &inboundv1.ListInboundEventsRequest{TaskId: in.GetTaskId(), AfterSeq: 1, WaitSeconds: 30})
		got <- answer{res, err}
	}()
	f.answer(t, in, "the answer")
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	evs := a.res.GetEvents()
	if len(evs) != 2 || evs[0].GetKind() != inboundv1.InboundEventKind_INBOUND_EVENT_KIND_ANSWER || evs[0].GetText() != "the answer" ||
		evs[1].GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED || a.res.GetInbound().GetVersion() != 3 {
		t.Errorf("events after 1 = %v (task %v), want the answer, then completed, at version 3", evs, a.res.GetInbound())
	}
	all, err := f.door.ListInboundEvents(remote("a2a-alice", 0), &inboundv1.ListInboundEventsRequest{TaskId: in.GetTaskId()})
	if err != nil || len(all.GetEvents()) != 3 || all.GetEvents()[0].GetSeq() != 1 {
		t.Errorf("the whole log = %v, %v; want 3 events from seq 1", all, err)
	}
	// Nothing after the last event: an answer with none, at once when it
	// may not wait.
	none, err := f.door.ListInboundEvents(remote("a2a-alice", 0), &inboundv1.ListInboundEventsRequest{TaskId: in.GetTaskId(), AfterSeq: 3})
	if err != nil || len(none.GetEvents()) != 0 {
		t.Errorf("events after the last = %v, %v; want none", none, err)
	}
	if _, err := f.door.ListInboundEvents(remote("a2a-carol", 0), &inboundv1.ListInboundEventsRequest{TaskId: in.GetTaskId()}); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("another sender's events: %v, want not_found", err)
	}
}

// TestPushConfigsAreTheSendersAndWakeTheWorkflow: push configs belong to
// the task's sender; their webhooks pass the egress guard; creating one,
// and each change of a task that has one, hands the task to its workflow.
func TestPushConfigsAreTheSendersAndWakeTheWorkflow(t *testing.T) {
	f := startDoor(t)
	in := f.deliver(t, "a2a-alice", "m-1")
	bare := f.deliver(t, "a2a-alice", "m-2")
	alice, carol := remote("a2a-alice", 0), remote("a2a-carol", 0)
	created, err := f.door.CreatePushConfig(alice, &inboundv1.CreatePushConfigRequest{TaskId: in.GetTaskId(), Url: "http://127.0.0.1:9/hook", Token: "t0k"})
	if err != nil {
		t.Fatal(err)
	}
	c := created.GetConfig()
	if c.GetConfigId() == "" || c.GetDeliveredSeq() != 1 || c.GetToken() != "t0k" {
		t.Errorf("created %v, want a new id, later events only (after 1), the token", c)
	}
	if n := f.wf.notifications(); len(n) != 1 || n[0].GetTaskId() != in.GetTaskId() || n[0].GetAgentId() != "bob" || n[0].GetSender() != "a2a-alice" {
		t.Errorf("notifications after creating a config: %v, want the task's", n)
	}
	if _, err := f.door.CreatePushConfig(alice, &inboundv1.CreatePushConfigRequest{TaskId: in.GetTaskId(), Url: "http://10.1.2.3/hook"}); servertest.Code(t, err) != connect.CodeInvalidArgument {
		t.Errorf("a webhook on a private address: %v, want invalid_argument (egress guard)", err)
	}
	for name, call := range map[string]func() error{
		"create": func() error {
			_, err := f.door.CreatePushConfig(carol, &inboundv1.CreatePushConfigRequest{TaskId: in.GetTaskId(), Url: "http://127.0.0.1:9/x"})
			return err
		},
		"get": func() error {
			_, err := f.door.GetPushConfig(carol, &inboundv1.GetPushConfigRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId()})
			return err
		},
		"list": func() error {
			_, err := f.door.ListPushConfigs(carol, &inboundv1.ListPushConfigsRequest{TaskId: in.GetTaskId()})
			return err
		},
		"delete": func() error {
			_, err := f.door.DeletePushConfig(carol, &inboundv1.DeletePushConfigRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId()})
			return err
		},
	} {
		if err := call(); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another sender's %s: %v, want not_found", name, err)
		}
	}
	if got, err := f.door.GetPushConfig(alice, &inboundv1.GetPushConfigRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId()}); err != nil || got.GetConfig().GetUrl() != c.GetUrl() {
		t.Errorf("GetPushConfig = %v, %v", got, err)
	}

	// The task changes: its workflow hears of it. A task without configs
	// has no workflow to tell.
	if _, err := f.door.CancelInbound(alice, &inboundv1.CancelInboundRequest{TaskId: in.GetTaskId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.door.CancelInbound(alice, &inboundv1.CancelInboundRequest{TaskId: bare.GetTaskId()}); err != nil {
		t.Fatal(err)
	}
	if n := f.wf.notifications(); len(n) != 2 || n[1].GetTaskId() != in.GetTaskId() {
		t.Errorf("notifications after two cancels: %v, want the configured task's only", n)
	}

	// What the workflow reads: the service's role only.
	worker := remote("toolmesh-worker-remoteagents", 0)
	if _, err := f.twin.RefreshInbound(at("mallory", 0), &remoteagentsv1.RefreshInboundRequest{TaskId: in.GetTaskId()}); servertest.Code(t, err) != connect.CodePermissionDenied {
		t.Errorf("an agent refreshing: %v, want permission_denied", err)
	}
	ref, err := f.twin.RefreshInbound(worker, &remoteagentsv1.RefreshInboundRequest{TaskId: in.GetTaskId()})
	if err != nil || ref.GetInbound().GetVersion() != 2 || len(ref.GetConfigs()) != 1 {
		t.Fatalf("RefreshInbound = %v, %v; want the cancelled task (version 2) and its config", ref, err)
	}
	d, err := f.twin.GetPushDelivery(worker, &remoteagentsv1.GetPushDeliveryRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId(), Seq: 2})
	if err != nil || d.GetEvent().GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED || d.GetConfig().GetToken() != "t0k" {
		t.Errorf("GetPushDelivery = %v, %v; want the cancel, for the config", d, err)
	}
	if _, err := f.twin.RecordPushDelivered(worker, &remoteagentsv1.RecordPushDeliveredRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId(), Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if got, err := f.door.ListPushConfigs(alice, &inboundv1.ListPushConfigsRequest{TaskId: in.GetTaskId()}); err != nil || got.GetConfigs()[0].GetDeliveredSeq() != 2 {
		t.Errorf("configs after the delivery = %v, %v; want delivered up to 2", got, err)
	}
	if _, err := f.door.DeletePushConfig(alice, &inboundv1.DeletePushConfigRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.twin.GetPushDelivery(worker, &remoteagentsv1.GetPushDeliveryRequest{TaskId: in.GetTaskId(), ConfigId: c.GetConfigId(), Seq: 2}); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("a delivery to a deleted config: %v, want not_found", err)
	}
}
