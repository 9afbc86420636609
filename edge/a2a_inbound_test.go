package edge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
)

// delivery is one DeliverInbound the inbound stand-in got.
type delivery struct {
	caller mesh.Caller
	req    *inboundv1.DeliverInboundRequest
}

// inbound stands in for the InboundService the remoteagents domain serves:
// it serves bob (active; anyone else is not served), keeps tasks, their
// event logs and push configs in memory, and refuses delivery from depth 3
// on as the messages service does. answer and cancel move a task and wake
// the readers of its log.
type inbound struct {
	inboundv1connect.UnimplementedInboundServiceHandler
	mu         sync.Mutex
	deliveries []delivery
	tasks      map[string]*inboundv1.Inbound
	events     map[string][]*inboundv1.InboundEvent
	configs    map[string][]*inboundv1.PushConfig
	changed    chan struct{} // closed and replaced on every change
}

// Messages the stand-in fails to deliver: as a busy or restarting
// service does (unavailable), and as a bug does (internal).
const (
	failUnavailable = "fail: unavailable"
	failInternal    = "fail: internal"
)

func newInbound() *inbound {
	return &inbound{tasks: map[string]*inboundv1.Inbound{}, events: map[string][]*inboundv1.InboundEvent{},
		configs: map[string][]*inboundv1.PushConfig{}, changed: make(chan struct{})}
}

func (f *inbound) GetAgent(_ context.Context, req *inboundv1.GetAgentRequest) (*inboundv1.GetAgentResponse, error) {
	if req.GetAgentId() == "bob" {
		return &inboundv1.GetAgentResponse{Agent: &inboundv1.Agent{AgentId: "bob", DisplayName: "Bob", Description: "Books trips."}}, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s not found", req.GetAgentId()))
}

// ListAgents pages through 250 agents, bob and agent-000 to agent-248, 200
// at a time at most, as the directory does.
func (f *inbound) ListAgents(_ context.Context, req *inboundv1.ListAgentsRequest) (*inboundv1.ListAgentsResponse, error) {
	all := []*inboundv1.Agent{{AgentId: "bob", DisplayName: "Bob", Description: "Books trips."}}
	for i := range 249 {
		all = append(all, &inboundv1.Agent{AgentId: fmt.Sprintf("agent-%03d", i)})
	}
	limit := min(max(req.GetLimit(), 1), 200)
	from := min(int(req.GetOffset()), len(all))
	to := min(from+int(limit), len(all))
	page := &pagev1.Page{Offset: int32(from), Limit: limit, Total: int32(len(all))}
	if to < len(all) {
		page.NextOffset = new(int32(to))
	}
	return &inboundv1.ListAgentsResponse{Agents: all[from:to], Page: page}, nil
}

// appendLocked records an event of a task and moves its version.
func (f *inbound) appendLocked(in *inboundv1.Inbound, ev *inboundv1.InboundEvent) {
	in.Version++
	ev.TaskId, ev.Seq, ev.Time = in.GetTaskId(), in.GetVersion(), timestamppb.Now()
	f.events[in.GetTaskId()] = append(f.events[in.GetTaskId()], ev)
	in.UpdateTime = ev.GetTime()
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *inbound) DeliverInbound(ctx context.Context, req *inboundv1.DeliverInboundRequest) (*inboundv1.DeliverInboundResponse, error) {
	c := mesh.FromContext(ctx).Caller
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deliveries = append(f.deliveries, delivery{c, req})
	switch req.GetText() {
	case failUnavailable:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("database is locked"))
	case failInternal:
		return nil, connect.NewError(connect.CodeInternal, errors.New("a bug"))
	}
	if c.Depth >= 3 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("Cannot send message: invocation depth %d exceeds maximum of 3.", c.Depth)) //nolint:staticcheck // the exact sentence
	}
	in := &inboundv1.Inbound{TaskId: fmt.Sprintf("tsk_%d", len(f.deliveries)), ContextId: "ctx_1", AgentId: req.GetAgentId(), Sender: c.Agent,
		A2AMessageId: req.GetA2AMessageId(), MessageId: "msg_1", ThreadId: "thr_1", Text: req.GetText(), Depth: int32(c.Depth) + 1,
		Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING, CreateTime: timestamppb.Now()}
	f.tasks[in.GetTaskId()] = in
	f.appendLocked(in, &inboundv1.InboundEvent{Kind: inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS, Status: in.GetStatus()})
	return &inboundv1.DeliverInboundResponse{Inbound: clone(in)}, nil
}

func clone(in *inboundv1.Inbound) *inboundv1.Inbound { return proto.Clone(in).(*inboundv1.Inbound) }

func (f *inbound) own(ctx context.Context, id string) (*inboundv1.Inbound, error) {
	in, ok := f.tasks[id]
	if !ok || in.GetSender() != mesh.FromContext(ctx).Caller.Agent {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", id))
	}
	return in, nil
}

func (f *inbound) GetInbound(ctx context.Context, req *inboundv1.GetInboundRequest) (*inboundv1.GetInboundResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.own(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	return &inboundv1.GetInboundResponse{Inbound: clone(in)}, nil
}

func (f *inbound) CancelInbound(ctx context.Context, req *inboundv1.CancelInboundRequest) (*inboundv1.CancelInboundResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.own(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if in.GetStatus() == inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("task %s is completed", in.GetTaskId()))
	}
	if in.GetStatus() == inboundv1.InboundStatus_INBOUND_STATUS_WORKING {
		in.Status = inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED
		f.appendLocked(in, &inboundv1.InboundEvent{Kind: inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS, Status: in.GetStatus()})
	}
	return &inboundv1.CancelInboundResponse{Inbound: clone(in)}, nil
}

// answer is bob answering a task: the answer, then the completed status.
func (f *inbound) answer(id, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in := f.tasks[id]
	in.Status, in.Answer, in.AnswerMessageId = inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED, text, "msg_answer"
	f.appendLocked(in, &inboundv1.InboundEvent{Kind: inboundv1.InboundEventKind_INBOUND_EVENT_KIND_ANSWER, Status: in.GetStatus(), Text: text, MessageId: "msg_answer"})
	f.appendLocked(in, &inboundv1.InboundEvent{Kind: inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS, Status: in.GetStatus(), Text: text, MessageId: "msg_answer"})
}

func (f *inbound) ListInbound(ctx context.Context, req *inboundv1.ListInboundRequest) (*inboundv1.ListInboundResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &inboundv1.ListInboundResponse{}
	for i := len(f.deliveries); i >= 1; i-- {
		in, ok := f.tasks[fmt.Sprintf("tsk_%d", i)]
		if ok && in.GetSender() == mesh.FromContext(ctx).Caller.Agent && in.GetAgentId() == req.GetAgentId() &&
			(req.GetStatus() == 0 || in.GetStatus() == req.GetStatus()) {
			out.Inbounds = append(out.Inbounds, clone(in))
		}
	}
	out.TotalSize = int32(len(out.Inbounds))
	return out, nil
}

func (f *inbound) ListInboundEvents(ctx context.Context, req *inboundv1.ListInboundEventsRequest) (*inboundv1.ListInboundEventsResponse, error) {
	deadline := time.After(time.Duration(req.GetWaitSeconds()) * time.Second)
	for {
		f.mu.Lock()
		in, err := f.own(ctx, req.GetTaskId())
		if err != nil {
			f.mu.Unlock()
			return nil, err
		}
		var evs []*inboundv1.InboundEvent
		for _, e := range f.events[req.GetTaskId()] {
			if e.GetSeq() > req.GetAfterSeq() {
				evs = append(evs, e)
			}
		}
		res, changed := &inboundv1.ListInboundEventsResponse{Events: evs, Inbound: clone(in)}, f.changed
		f.mu.Unlock()
		if len(evs) > 0 {
			return res, nil
		}
		select {
		case <-changed:
		case <-deadline:
			return res, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (f *inbound) CreatePushConfig(ctx context.Context, req *inboundv1.CreatePushConfigRequest) (*inboundv1.CreatePushConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	in, err := f.own(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	id := req.GetConfigId()
	if id == "" {
		id = fmt.Sprintf("pcfg_%d", len(f.configs[in.GetTaskId()])+1)
	}
	c := &inboundv1.PushConfig{TaskId: in.GetTaskId(), ConfigId: id, Url: req.GetUrl(), Token: req.GetToken(), AuthScheme: req.GetAuthScheme(),
		AuthCredentials: req.GetAuthCredentials(), DeliveredSeq: in.GetVersion()}
	f.configs[in.GetTaskId()] = append(f.configs[in.GetTaskId()], c)
	return &inboundv1.CreatePushConfigResponse{Config: c}, nil
}

func (f *inbound) ListPushConfigs(ctx context.Context, req *inboundv1.ListPushConfigsRequest) (*inboundv1.ListPushConfigsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.own(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	return &inboundv1.ListPushConfigsResponse{Configs: f.configs[req.GetTaskId()]}, nil
}

func (f *inbound) GetPushConfig(ctx context.Context, req *inboundv1.GetPushConfigRequest) (*inboundv1.GetPushConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.own(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	for _, c := range f.configs[req.GetTaskId()] {
		if c.GetConfigId() == req.GetConfigId() {
			return &inboundv1.GetPushConfigResponse{Config: c}, nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("config %s not found", req.GetConfigId()))
}

func (f *inbound) DeletePushConfig(ctx context.Context, req *inboundv1.DeletePushConfigRequest) (*inboundv1.DeletePushConfigResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.own(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	var kept []*inboundv1.PushConfig
	for _, c := range f.configs[req.GetTaskId()] {
		if c.GetConfigId() != req.GetConfigId() {
			kept = append(kept, c)
		}
	}
	f.configs[req.GetTaskId()] = kept
	return &inboundv1.DeletePushConfigResponse{}, nil
}

func (f *inbound) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.deliveries)
}

func (f *inbound) lastDelivery() delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deliveries[len(f.deliveries)-1]
}
