package remoteagents_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/services/remoteagents"
)

// fakeEngine stands in for Temporal: each started invocation waits in
// memory until the test ends it. The workflow itself is tested in
// workers/remoteagents, and the two together against real processes in
// cmd/toolmesh.
type fakeEngine struct {
	mu       sync.Mutex
	runs     map[string]*fakeRun // by workflow id
	starts   int
	startErr error
	notified []*remoteagentsv1.InboundWorkflowInput            // NotifyInbound's inputs
	extends  map[string]*remoteagentsv1.ExtendInvocationUpdate // by update id
}

type fakeRun struct {
	in      *remoteagentsv1.InvokeWorkflowInput
	now     *remoteagentsv1.InvokeOutcome // what the status query says
	outcome *remoteagentsv1.InvokeOutcome
	done    chan struct{}
}

func newFakeEngine() *fakeEngine { return &fakeEngine{runs: map[string]*fakeRun{}} }

func (f *fakeEngine) StartInvoke(_ context.Context, in *remoteagentsv1.InvokeWorkflowInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if f.startErr != nil {
		return f.startErr
	}
	id := remoteagents.WorkflowID(in.GetAgentId(), in.GetInvocationId())
	if _, ok := f.runs[id]; !ok {
		f.runs[id] = &fakeRun{in: in, done: make(chan struct{}),
			now: &remoteagentsv1.InvokeOutcome{InvocationId: in.GetInvocationId(), Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_WORKING}}
	}
	return nil
}

func (f *fakeEngine) NotifyInbound(_ context.Context, in *remoteagentsv1.InboundWorkflowInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notified = append(f.notified, in)
	return nil
}

func (f *fakeEngine) notifications() []*remoteagentsv1.InboundWorkflowInput {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*remoteagentsv1.InboundWorkflowInput(nil), f.notified...)
}

func (f *fakeEngine) run(id string) *fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

// progress makes the running invocation's status query report o.
func (f *fakeEngine) progress(id string, o *remoteagentsv1.InvokeOutcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[id].now = o
}

// end ends the invocation with o.
func (f *fakeEngine) end(id string, o *remoteagentsv1.InvokeOutcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.runs[id]
	if r.outcome == nil {
		r.outcome = o
		close(r.done)
	}
}

func (f *fakeEngine) WaitInvoke(ctx context.Context, id string) (*remoteagentsv1.InvokeOutcome, error) {
	r := f.run(id)
	if r == nil {
		return nil, remoteagents.ErrNoWorkflow
	}
	select {
	case <-r.done:
		return r.outcome, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeEngine) QueryInvoke(_ context.Context, id string) (*remoteagentsv1.InvokeOutcome, error) {
	r := f.run(id)
	if r == nil {
		return nil, remoteagents.ErrNoWorkflow
	}
	select {
	case <-r.done:
		return nil, remoteagents.ErrNoWorkflow // an ended workflow takes no queries
	default:
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.now, nil
}

// ExtendInvoke refuses an ended run or an expiry not later than the run's,
// as the workflow's validator does, and records each update id once.
func (f *fakeEngine) ExtendInvoke(_ context.Context, id, updateID string, up *remoteagentsv1.ExtendInvocationUpdate) (*remoteagentsv1.InvokeOutcome, error) {
	r := f.run(id)
	if r == nil {
		return nil, remoteagents.ErrNoWorkflow
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.outcome != nil {
		return nil, remoteagents.ErrNoWorkflow
	}
	if f.extends == nil {
		f.extends = map[string]*remoteagentsv1.ExtendInvocationUpdate{}
	}
	if _, seen := f.extends[updateID]; !seen {
		if !up.GetExpireTime().AsTime().After(r.in.GetExpireTime().AsTime()) {
			return nil, &remoteagents.ExtendRefusedError{Message: "the new expiry is not later than the invocation's"}
		}
		f.extends[updateID] = up
		r.in.ExpireTime = up.GetExpireTime()
	}
	now := proto.CloneOf(r.now)
	now.ExpireTime = f.extends[updateID].GetExpireTime()
	return now, nil
}

func (f *fakeEngine) CancelInvoke(_ context.Context, id string) error {
	if f.run(id) == nil {
		return nil
	}
	f.end(id, &remoteagentsv1.InvokeOutcome{InvocationId: f.run(id).in.GetInvocationId(),
		Status: remoteagentsv1.InvocationStatus_INVOCATION_STATUS_CANCELLED, ResolveTime: timestamppb.Now()})
	return nil
}

// fakeMessages is the messages service as the inbound RPCs use it: Send
// (refused from depth 3 on, the message one deeper than its sender, once
// per idempotency key), Get and List of a thread, for the verified caller.
type fakeMessages struct {
	messagesv1connect.UnimplementedMessagesServiceHandler
	mu   sync.Mutex
	list []*messagesv1.Message
	keys map[string]*messagesv1.Message
}

func (f *fakeMessages) Send(ctx context.Context, req *messagesv1.SendRequest) (*messagesv1.SendResponse, error) {
	call := mesh.FromContext(ctx)
	if call.Caller.Depth >= 3 {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("Cannot send message: invocation depth %d exceeds maximum of 3.", call.Caller.Depth)) //nolint:staticcheck // the exact sentence
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	key := call.Caller.Agent + "/" + call.IdempotencyKey
	if m, ok := f.keys[key]; ok && call.IdempotencyKey != "" {
		return &messagesv1.SendResponse{Message: m}, nil
	}
	thread := req.GetThreadId()
	if thread == "" {
		thread = ids.New("thr")
	}
	m := &messagesv1.Message{Id: ids.New("msg"), ThreadId: thread, FromAgent: call.Caller.Agent, ToAgent: req.GetToAgent(), Text: req.GetMessage(),
		CreateTime: timestamppb.Now(), Depth: int32(call.Caller.Depth) + 1}
	f.list = append(f.list, m)
	if f.keys == nil {
		f.keys = map[string]*messagesv1.Message{}
	}
	f.keys[key] = m
	return &messagesv1.SendResponse{Message: m}, nil
}

func (f *fakeMessages) List(ctx context.Context, req *messagesv1.ListRequest) (*messagesv1.ListResponse, error) {
	agent := mesh.FromContext(ctx).Caller.Agent
	f.mu.Lock()
	defer f.mu.Unlock()
	out := &messagesv1.ListResponse{}
	for i := len(f.list) - 1; i >= 0; i-- { // newest first
		m := f.list[i]
		if m.GetThreadId() == req.GetThreadId() && (m.GetFromAgent() == agent || m.GetToAgent() == agent) {
			out.Messages = append(out.Messages, m)
		}
	}
	return out, nil
}

// inbox is what agent received.
func (f *fakeMessages) inbox(agent string) []*messagesv1.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*messagesv1.Message
	for _, m := range f.list {
		if m.GetToAgent() == agent {
			out = append(out, m)
		}
	}
	return out
}

// errStart is a workflow start that fails.
var errStart = errors.New("temporal is down")

// eventually polls cond until it holds, for at most 30 s: a bound for a
// loaded machine, which a passing test never waits out.
func eventually(cond func() bool) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// servertestService registers the fake messages service.
func servertestService(f *fakeMessages) server.Service {
	return server.Register(messagesv1connect.MessagesServiceName, messagesv1connect.MessagesServiceHandler(f), messagesv1connect.NewMessagesServiceHandler, messagesv1.RegisterMessagesServiceHandler)
}

func sendReq(to, thread, text string) *messagesv1.SendRequest {
	return &messagesv1.SendRequest{ToAgent: to, ThreadId: thread, Message: text}
}
