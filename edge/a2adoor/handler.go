package a2adoor

import (
	"context"
	"errors"
	"iter"
	"net/http"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2asrv"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// handler is the door's a2asrv.RequestHandler: each A2A method is a call
// of the toolmesh.inbound.v1 contract, as the sender, for the agent the
// call names. It answers only with A2A errors whose words are its own: a
// cause it does not show is logged.
type handler struct {
	g *Door
}

var _ a2asrv.RequestHandler = (*handler)(nil)

var errInternal = a2a.NewError(a2a.ErrInternalError, "Internal error: the mesh could not serve the request")

// errUnavailable answers a call that a part of the mesh could not serve
// for now (a service down, restarting or busy, or too slow): A2A has no
// code of its own for it, so it is an internal error whose words and
// details say to try again. Trying again is safe: a message is delivered
// once per sender and message id.
var errUnavailable = a2a.NewError(a2a.ErrInternalError, "Unavailable: a part of the mesh is down or busy; try again (a message is delivered once per message id)").
	WithDetails(map[string]any{"retryable": true})

// failed is the answer to a contract call that failed for a reason the
// caller is not told: errUnavailable when the failure is transient
// (unavailable, or past its deadline), else errInternal.
func failed(err error) *a2a.Error {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded:
		return errUnavailable
	}
	return errInternal
}

func errorIs(err, target error) bool { return errors.Is(err, target) }

// target is the agent a call is for: the one its URL names, or over gRPC
// the request's tenant; a tenant naming another agent than the URL is not
// served.
func (h *handler) target(ctx context.Context, tenant string) (string, error) {
	c := callOf(ctx)
	if tenant == "" {
		tenant = c.tenant
	}
	switch {
	case c.agent != "" && tenant != "" && tenant != c.agent:
		return "", a2a.NewError(a2a.ErrInvalidParams, "Invalid params: tenant names another agent than the URL")
	case c.agent != "":
		if !c.served {
			if err := h.served(ctx, c.agent); err != nil {
				return "", err
			}
		}
		return c.agent, nil
	case tenant == "":
		return "", h.g.reject(ctx, []boundary.Violation{{Field: "tenant", Rule: "required", Message: "names the agent (the tenant of its card's gRPC interface)"}})
	}
	if err := h.served(ctx, tenant); err != nil {
		return "", err
	}
	return tenant, nil
}

func (h *handler) served(ctx context.Context, agent string) error {
	if _, err := h.g.activeAgent(ctx, agent); err != nil {
		if agentMissing(err) {
			return a2a.NewError(a2a.ErrTaskNotFound, "no such agent is served here")
		}
		h.g.log.ErrorContext(ctx, "a2a.directory_failed", "agent", logging.Scrub(agent), "error", err)
		return failed(err)
	}
	return nil
}

// as returns ctx calling InboundService as the sender, at depth.
func as(ctx context.Context, depth int) context.Context {
	p := callOf(ctx).principal
	c := mesh.Caller{Subject: p.Subject, Agent: sender(p), Roles: []string{mesh.RoleService}, Depth: depth}
	return mesh.WithCall(ctx, mesh.Call{Caller: c})
}

// fault maps a failed contract call to its A2A error: a task the sender
// does not have is TaskNotFound, one that cannot be cancelled
// TaskNotCancelable, bad input InvalidParams, a refusal of the mesh (the
// depth limit) the binding's refusal in the mesh's words; anything else is
// logged and answered as an internal error without details.
func (h *handler) fault(ctx context.Context, method string, err error) error {
	var ae *a2a.Error
	if errors.As(err, &ae) {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(ce) {
		switch ce.Code() {
		case connect.CodeNotFound:
			return a2a.NewError(a2a.ErrTaskNotFound, "Task not found")
		case connect.CodeFailedPrecondition:
			if method == "CancelTask" {
				return a2a.NewError(a2a.ErrTaskNotCancelable, "Task cannot be canceled: "+ce.Message())
			}
			return refusal(ctx, ce.Message())
		case connect.CodeAlreadyExists, connect.CodePermissionDenied:
			return refusal(ctx, ce.Message())
		case connect.CodeInvalidArgument:
			return a2a.NewError(a2a.ErrInvalidParams, "Invalid params: "+ce.Message())
		}
	}
	h.g.log.ErrorContext(ctx, "a2a.request_failed", "method", method, "error", err)
	return failed(err)
}

// refusal is the mesh refusing a well-formed request (the depth limit), in
// its words: -32000 over JSON-RPC, as 0.3 clients have always seen it,
// and FAILED_PRECONDITION (400) over HTTP+JSON and gRPC, which have no
// "server error" that is not a 5xx.
func refusal(ctx context.Context, msg string) error {
	if callOf(ctx).binding == bindingJSONRPC {
		return a2a.NewError(a2a.ErrServerError, msg)
	}
	return a2a.NewError(a2a.ErrUnsupportedOperation, msg)
}

// SendMessage delivers a message and answers with the task it opened, at
// once: an agent of the mesh answers in its own time (through its inbox),
// so a send does not wait for the task to end whatever returnImmediately
// says; the task is followed with GetTask, SubscribeToTask or a push
// config.
func (h *handler) SendMessage(ctx context.Context, req *a2a.SendMessageRequest) (a2a.SendMessageResult, error) {
	in, err := h.deliver(ctx, req)
	if err != nil {
		return nil, err
	}
	var hl *int
	if req.Config != nil {
		hl = req.Config.HistoryLength
	}
	return task(in, hl), nil
}

// deliver checks a message at the boundary, verifies the depth its
// sending mesh signed, delivers it and registers the push config it
// carries.
func (h *handler) deliver(ctx context.Context, req *a2a.SendMessageRequest) (*inboundv1.Inbound, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if vs := checkSend(req); vs != nil {
		return nil, h.g.reject(ctx, vs)
	}
	m := req.Message
	text, allText := messageText(m)
	if !allText {
		return nil, a2a.NewError(a2a.ErrUnsupportedContentType, "Content type not supported: this agent takes text parts only")
	}
	// The depth its sending mesh signed, when it carries one, decides the
	// depth it is delivered at (the sender's depth is one less); without
	// one it starts a new chain.
	senderDepth := 0
	if tok, ok := m.Metadata[a2alink.MetadataDepthToken].(string); ok {
		d, err := h.g.depth.Verify(ctx, tok, m.ID, h.g.endpoint(agent), h.g.restEndpoint(agent))
		if err != nil {
			field := "message.metadata." + a2alink.MetadataDepthToken
			if de, ok := errors.AsType[*a2alink.DepthError](err); ok {
				field += "." + de.Field
			}
			return nil, h.g.reject(ctx, []boundary.Violation{{Field: field, Rule: "depth_token", Message: err.Error()}})
		}
		senderDepth = max(d.Depth-1, 0)
	}
	var pc *a2a.PushConfig
	if req.Config != nil && req.Config.PushConfig != nil {
		pc = req.Config.PushConfig
		if vs := checkPushConfig(pc, false); vs != nil {
			return nil, h.g.reject(ctx, vs)
		}
	}
	res, err := h.g.inbound.DeliverInbound(as(ctx, senderDepth), &inboundv1.DeliverInboundRequest{
		AgentId: agent, Text: text, A2AMessageId: m.ID, ContextId: m.ContextID,
	})
	if err != nil {
		return nil, h.fault(ctx, "SendMessage", err)
	}
	in := res.GetInbound()
	c := callOf(ctx)
	h.g.log.InfoContext(ctx, "a2a.message_delivered", "agent", agent, "sender", in.GetSender(), "task_id", in.GetTaskId(), "depth", in.GetDepth(),
		"binding", c.binding, "version", c.version)
	if pc != nil {
		pc.TaskID = a2a.TaskID(in.GetTaskId())
		if _, err := h.createPush(ctx, pc); err != nil {
			return nil, err
		}
	}
	return in, nil
}

// task is an inbound task as A2A shows it, with at most historyLength
// messages of its history.
func task(in *inboundv1.Inbound, historyLength *int) *a2a.Task {
	t := a2alink.Task(in)
	if historyLength != nil && *historyLength < len(t.History) {
		t.History = t.History[len(t.History)-*historyLength:]
	}
	return t
}

// current is one of the sender's tasks to agent, as it is now.
func (h *handler) current(ctx context.Context, method, agent string, id a2a.TaskID) (*inboundv1.Inbound, error) {
	if vs := checkTaskID("id", id); vs != nil {
		return nil, h.g.reject(ctx, vs)
	}
	res, err := h.g.inbound.GetInbound(as(ctx, 0), &inboundv1.GetInboundRequest{TaskId: string(id)})
	if err != nil {
		return nil, h.fault(ctx, method, err)
	}
	if res.GetInbound().GetAgentId() != agent {
		return nil, a2a.NewError(a2a.ErrTaskNotFound, "Task not found")
	}
	return res.GetInbound(), nil
}

// GetTask shows one of the sender's tasks.
func (h *handler) GetTask(ctx context.Context, req *a2a.GetTaskRequest) (*a2a.Task, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if vs := checkHistory(req.HistoryLength); vs != nil {
		return nil, h.g.reject(ctx, vs)
	}
	in, err := h.current(ctx, "GetTask", agent, req.ID)
	if err != nil {
		return nil, err
	}
	return task(in, req.HistoryLength), nil
}

// ListTasks lists the sender's tasks to the agent, the most recently
// changed first, a page at a time (50 unless pageSize says 1 to 100).
func (h *handler) ListTasks(ctx context.Context, req *a2a.ListTasksRequest) (*a2a.ListTasksResponse, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if q := callOf(ctx).list; q != nil {
		// What the REST transport dropped.
		req.HistoryLength, req.StatusTimestampAfter = q.HistoryLength, q.StatusTimestampAfter
	}
	var vs []boundary.Violation
	if req.PageSize < 0 || req.PageSize > maxPageSize {
		vs = append(vs, boundary.Violation{Field: "pageSize", Rule: "int.range", Message: "must be 1 to 100 (0: 50)"})
	}
	vs = append(vs, checkHistory(req.HistoryLength)...)
	status, known := a2alink.InboundStatus(req.Status)
	if !known && req.Status != a2a.TaskStateUnspecified {
		switch req.Status {
		case a2a.TaskStateFailed, a2a.TaskStateRejected, a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired:
		default:
			vs = append(vs, boundary.Violation{Field: "status", Rule: "enum", Message: "not a task state"})
		}
	}
	if len(req.PageToken) > 512 || len(req.ContextID) > maxID {
		vs = append(vs, boundary.Violation{Field: "pageToken", Rule: "string.max_len", Message: "pageToken at most 512 bytes, contextId 256"})
	}
	if vs != nil {
		return nil, h.g.reject(ctx, vs)
	}
	out := &a2a.ListTasksResponse{Tasks: []*a2a.Task{}, PageSize: req.PageSize}
	if out.PageSize == 0 {
		out.PageSize = 50
	}
	if !known && req.Status != a2a.TaskStateUnspecified {
		// A state no task of the mesh's agents is ever in.
		return out, nil
	}
	lr := &inboundv1.ListInboundRequest{AgentId: agent, ContextId: req.ContextID, Status: status, PageSize: int32(req.PageSize), PageToken: req.PageToken}
	if req.StatusTimestampAfter != nil {
		lr.UpdatedAfter = timestamppb.New(*req.StatusTimestampAfter)
	}
	res, err := h.g.inbound.ListInbound(as(ctx, 0), lr)
	if err != nil {
		return nil, h.fault(ctx, "ListTasks", err)
	}
	hl := req.HistoryLength
	for _, in := range res.GetInbounds() {
		t := task(in, hl)
		if !req.IncludeArtifacts {
			t.Artifacts = nil
		}
		out.Tasks = append(out.Tasks, t)
	}
	out.TotalSize, out.NextPageToken = int(res.GetTotalSize()), res.GetNextPageToken()
	return out, nil
}

// CancelTask cancels one of the sender's working tasks; one the agent
// answered cannot be cancelled, one cancelled already is answered as it is.
func (h *handler) CancelTask(ctx context.Context, req *a2a.CancelTaskRequest) (*a2a.Task, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if _, err := h.current(ctx, "CancelTask", agent, req.ID); err != nil {
		return nil, err
	}
	res, err := h.g.inbound.CancelInbound(as(ctx, 0), &inboundv1.CancelInboundRequest{TaskId: string(req.ID)})
	if err != nil {
		return nil, h.fault(ctx, "CancelTask", err)
	}
	return task(res.GetInbound(), nil), nil
}

// SendStreamingMessage delivers a message and streams its task: the task,
// then each of its events until it ends.
func (h *handler) SendStreamingMessage(ctx context.Context, req *a2a.SendMessageRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		in, err := h.deliver(ctx, req)
		if err != nil {
			yield(nil, err)
			return
		}
		var hl *int
		if req.Config != nil {
			hl = req.Config.HistoryLength
		}
		if !yield(task(in, hl), nil) {
			return
		}
		h.follow(ctx, in, in.GetVersion(), yield)
	}
}

// SubscribeToTask streams one of the sender's tasks: the task as it is,
// then each later event until it ends. A subscriber that names the last
// event it has (Last-Event-ID) gets every event after it, also of a task
// that has ended since; one that names none cannot subscribe to an ended
// task (UnsupportedOperation: read it with GetTask).
func (h *handler) SubscribeToTask(ctx context.Context, req *a2a.SubscribeToTaskRequest) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		agent, err := h.target(ctx, req.Tenant)
		if err != nil {
			yield(nil, err)
			return
		}
		in, err := h.current(ctx, "SubscribeToTask", agent, req.ID)
		if err != nil {
			yield(nil, err)
			return
		}
		after := in.GetVersion()
		if last, ok := lastEventID(ctx); ok {
			seq, ok := a2alink.ParseEventID(in.GetTaskId(), last)
			if !ok || seq > in.GetVersion() {
				yield(nil, h.g.reject(ctx, []boundary.Violation{{Field: a2alink.ParamLastEventID, Rule: "event_id",
					Message: "must be the id of an event of this task (\"<task id>/<seq>\")"}}))
				return
			}
			after = seq
		} else if a2alink.Ended(in) {
			yield(nil, a2a.NewError(a2a.ErrUnsupportedOperation, "The task has ended: read it with GetTask, or name the last event you have (Last-Event-ID)"))
			return
		}
		if !yield(task(in, nil), nil) {
			return
		}
		h.follow(ctx, in, after, yield)
	}
}

// lastEventID is the Last-Event-ID service parameter of the call.
func lastEventID(ctx context.Context) (string, bool) {
	cc, ok := a2asrv.CallContextFrom(ctx)
	if !ok || cc.ServiceParams() == nil {
		return "", false
	}
	vs, ok := cc.ServiceParams().Get(http.CanonicalHeaderKey(a2alink.ParamLastEventID))
	if !ok || len(vs) == 0 || vs[0] == "" {
		return "", false
	}
	return vs[0], true
}

// GetExtendedAgentCard: the agents have no card beyond the public one.
func (h *handler) GetExtendedAgentCard(context.Context, *a2a.GetExtendedAgentCardRequest) (*a2a.AgentCard, error) {
	return nil, a2a.NewError(a2a.ErrExtendedCardNotConfigured, "This agent has no authenticated extended card")
}
