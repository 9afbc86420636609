package a2adoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/a2a"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/mesh"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// A2A JSON-RPC methods and error codes (A2A 0.3 §3.5.6, §8).
const (
	methodMessageSend      = "message/send"
	methodTasksGet         = "tasks/get"
	methodTasksCancel      = "tasks/cancel"
	codeMethodNotFound     = -32601
	codeInvalidParams      = -32602
	codeServerError        = -32000
	codeTaskNotFound       = -32001
	codeTaskNotCancelable  = -32002
	codePushNotSupported   = -32003
	codeUnsupportedOp      = -32004
	codeContentUnsupported = -32005
	codeExtendedCardNone   = -32007
)

// Limits of what an inbound message may carry.
const (
	a2aMaxText = 10000
	a2aMaxID   = 256
)

// a2aRequest is one inbound A2A request: a typed union selected by its
// method, exactly one of the params set.
type a2aRequest struct {
	id     json.RawMessage
	method string
	send   *a2a.MessageSendParams
	get    *a2a.TaskQueryParams
	cancel *a2a.TaskIDParams
}

// rpcFault is a JSON-RPC error answer.
type rpcFault struct {
	status int
	code   int
	msg    string
}

func (f *rpcFault) Error() string { return f.msg }

// serveRPC parses one JSON-RPC request at the a2a.jsonrpc boundary,
// authenticates its caller and answers it.
func (g *Door) serveRPC(w http.ResponseWriter, r *http.Request) {
	agent := r.PathValue("agent")
	p, ok := g.authenticate(w, r)
	if !ok {
		return
	}
	req, fault := g.parse(w, r)
	if fault != nil {
		id := json.RawMessage(nil)
		if req != nil {
			id = req.id
		}
		httpguard.WriteRPCError(w, fault.status, id, fault.code, fault.msg, nil)
		return
	}
	if _, err := g.activeAgent(r.Context(), agent); err != nil {
		g.agentError(w, r, req.id, agent, err)
		return
	}
	var res any
	var err error
	switch req.method {
	case methodMessageSend:
		res, err = g.send(r.Context(), p, agent, req.send)
	case methodTasksGet:
		res, err = g.getTask(r.Context(), p, agent, req.get)
	case methodTasksCancel:
		res, err = g.cancelTask(r.Context(), p, agent, req.cancel)
	}
	if err != nil {
		f := g.fault(r.Context(), req.method, err)
		httpguard.WriteRPCError(w, f.status, req.id, f.code, f.msg, map[string]string{"error": f.msg})
		return
	}
	b, err := json.Marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  any             `json:"result"`
	}{"2.0", req.id, res})
	if err != nil {
		httpguard.WriteRPCError(w, http.StatusInternalServerError, req.id, httpguard.CodeInternalError, "internal error", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// authenticate returns the caller: with authentication on, a bearer JWT
// for the A2A resource granting toolmesh:write; in development mode the
// local caller.
func (g *Door) authenticate(w http.ResponseWriter, r *http.Request) (*identity.Principal, bool) {
	if g.auth == nil {
		return g.dev, true
	}
	p, _, fail := g.auth.Authenticate(r)
	if fail == nil && !p.HasScope(identity.ScopeWrite) {
		fail = &identity.Failure{Status: http.StatusForbidden, Code: "insufficient_scope", Reason: "sending A2A messages needs scope " + identity.ScopeWrite, Scope: identity.ScopeWrite}
	}
	if fail != nil {
		w.Header().Set("WWW-Authenticate", g.auth.Challenge(fail))
		httpguard.WriteRPCError(w, fail.Status, nil, httpguard.CodeUnauthorized, fail.Text(), nil)
		return nil, false
	}
	return p, true
}

// parse reads the request at the a2a.jsonrpc boundary: the envelope first
// (a malformed one is -32700 or -32600), then the params of its method as
// that method's type. Params that do not fit are -32602, logged as one
// boundary.validation_failed event.
func (g *Door) parse(w http.ResponseWriter, r *http.Request) (*a2aRequest, *rpcFault) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return nil, &rpcFault{http.StatusUnsupportedMediaType, httpguard.CodeInvalidRequest, "Content-Type must be application/json"}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a2aMaxBody))
	if err != nil {
		return nil, &rpcFault{http.StatusRequestEntityTooLarge, httpguard.CodeInvalidRequest, fmt.Sprintf("the request body is larger than %d bytes", a2aMaxBody)}
	}
	var env struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	t := bytes.TrimSpace(body)
	if !json.Valid(t) {
		return nil, &rpcFault{http.StatusOK, httpguard.CodeParseError, "Parse error: the body is not JSON"}
	}
	if len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &env) != nil {
		return nil, &rpcFault{http.StatusOK, httpguard.CodeInvalidRequest, "Invalid request: the body must be one JSON-RPC request object (batches are not served)"}
	}
	req := &a2aRequest{method: env.Method}
	if httpguard.PlainID(env.ID) {
		req.id = env.ID
	}
	if env.JSONRPC != "2.0" || req.id == nil || env.Method == "" {
		return req, &rpcFault{http.StatusOK, httpguard.CodeInvalidRequest, `Invalid request: want "jsonrpc": "2.0", a string or number "id" and a "method"`}
	}
	var vs []boundary.Violation
	switch env.Method {
	case methodMessageSend:
		req.send = &a2a.MessageSendParams{}
		vs = decodeParams(env.Params, req.send)
		if vs == nil {
			vs = checkSend(req.send)
		}
	case methodTasksGet:
		req.get = &a2a.TaskQueryParams{}
		vs = decodeParams(env.Params, req.get)
		if vs == nil {
			vs = checkTaskID(string(req.get.ID))
			if h := req.get.HistoryLength; h != nil && *h < 0 {
				vs = append(vs, boundary.Violation{Field: "historyLength", Rule: "int.gte", Message: "must be 0 or more"})
			}
		}
	case methodTasksCancel:
		req.cancel = &a2a.TaskIDParams{}
		vs = decodeParams(env.Params, req.cancel)
		if vs == nil {
			vs = checkTaskID(string(req.cancel.ID))
		}
	case "message/stream", "tasks/resubscribe":
		return req, &rpcFault{http.StatusOK, codeUnsupportedOp, "Unsupported operation: this agent does not stream; use message/send and tasks/get"}
	case "tasks/pushNotificationConfig/set", "tasks/pushNotificationConfig/get", "tasks/pushNotificationConfig/list", "tasks/pushNotificationConfig/delete":
		return req, &rpcFault{http.StatusOK, codePushNotSupported, "Push notifications are not supported"}
	case "agent/getAuthenticatedExtendedCard":
		return req, &rpcFault{http.StatusOK, codeExtendedCardNone, "This agent has no authenticated extended card"}
	default:
		return req, &rpcFault{http.StatusOK, codeMethodNotFound, "Method not found: " + httpguard.Truncate(logging.Scrub(env.Method), 100)}
	}
	if len(vs) > 0 {
		boundary.LogRejection(r.Context(), g.log, boundary.A2AJSONRPC, vs)
		return req, &rpcFault{http.StatusOK, codeInvalidParams, "Invalid params: " + logging.Scrub(boundary.Summary(vs))}
	}
	if req.send != nil && req.send.Config != nil && req.send.Config.PushConfig != nil {
		return req, &rpcFault{http.StatusOK, codePushNotSupported, "Push notifications are not supported"}
	}
	if req.send != nil {
		for _, part := range req.send.Message.Parts {
			if _, ok := part.(a2a.TextPart); !ok {
				return req, &rpcFault{http.StatusOK, codeContentUnsupported, "Content type not supported: this agent takes text parts only"}
			}
		}
	}
	return req, nil
}

// decodeParams decodes params (an object) into v, naming the field a type
// error is in.
func decodeParams(params json.RawMessage, v any) []boundary.Violation {
	t := bytes.TrimSpace(params)
	if len(t) == 0 || t[0] != '{' {
		return []boundary.Violation{{Rule: "params.object", Message: "params must be an object"}}
	}
	if err := json.Unmarshal(t, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return []boundary.Violation{{Field: te.Field, Rule: "type", Message: fmt.Sprintf("must be a %s, not a %s", te.Type, te.Value)}}
		}
		return []boundary.Violation{{Rule: "type", Message: err.Error()}}
	}
	return nil
}

// checkSend checks what a message/send must carry: a user message with an
// id and text within bounds.
func checkSend(p *a2a.MessageSendParams) []boundary.Violation {
	m := p.Message
	if m == nil {
		return []boundary.Violation{{Field: "message", Rule: "required", Message: "value is required"}}
	}
	var vs []boundary.Violation
	add := func(field, rule, msg string) {
		vs = append(vs, boundary.Violation{Field: "message." + field, Rule: rule, Message: msg})
	}
	switch {
	case m.ID == "":
		add("messageId", "required", "value is required")
	case len(m.ID) > a2aMaxID:
		add("messageId", "string.max_len", fmt.Sprintf("at most %d bytes", a2aMaxID))
	}
	if m.Role != a2a.MessageRoleUser {
		add("role", "const", `must be "user"`)
	}
	if len(m.Parts) == 0 {
		add("parts", "repeated.min_items", "at least one part")
	}
	if len(m.TaskID) > a2aMaxID || len(m.ContextID) > a2aMaxID {
		add("taskId", "string.max_len", fmt.Sprintf("taskId and contextId: at most %d bytes", a2aMaxID))
	}
	allText := true
	for _, p := range m.Parts {
		_, isText := p.(a2a.TextPart)
		allText = allText && isText
	}
	// A message of other parts is valid A2A this agent does not take
	// (ContentTypeNotSupported, after the boundary).
	if n := utf8.RuneCountInString(messageText(m)); n > a2aMaxText {
		add("parts", "text.max_len", fmt.Sprintf("the text is %d characters; at most %d", n, a2aMaxText))
	} else if len(m.Parts) > 0 && allText && strings.TrimSpace(messageText(m)) == "" {
		add("parts", "text.min_len", "the text is empty")
	}
	if v, ok := m.Metadata[a2alink.MetadataDepthToken]; ok {
		if _, isString := v.(string); !isString {
			add("metadata."+a2alink.MetadataDepthToken, "type", "must be a string (a signed depth token)")
		}
	}
	return vs
}

func checkTaskID(id string) []boundary.Violation {
	switch {
	case id == "":
		return []boundary.Violation{{Field: "id", Rule: "required", Message: "value is required"}}
	case len(id) > a2aMaxID:
		return []boundary.Violation{{Field: "id", Rule: "string.max_len", Message: fmt.Sprintf("at most %d bytes", a2aMaxID)}}
	}
	return nil
}

// messageText is the message's text parts, joined.
func messageText(m *a2a.Message) string {
	var parts []string
	for _, p := range m.Parts {
		if t, ok := p.(a2a.TextPart); ok {
			parts = append(parts, t.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// as returns ctx calling InboundService as the sender, at depth.
func (g *Door) as(ctx context.Context, p *identity.Principal, depth int) context.Context {
	c := mesh.Caller{Subject: p.Subject, Agent: sender(p), Roles: []string{mesh.RoleService}, Depth: depth}
	return mesh.WithCall(ctx, mesh.Call{Caller: c})
}

// send delivers a message/send: the depth its sending mesh signed, when it
// carries one, decides the depth it is delivered at (the sender's depth is
// one less); without one it starts a new chain.
func (g *Door) send(ctx context.Context, p *identity.Principal, agent string, params *a2a.MessageSendParams) (any, error) {
	m := params.Message
	senderDepth := 0
	if tok, ok := m.Metadata[a2alink.MetadataDepthToken].(string); ok {
		d, err := g.depth.Verify(ctx, tok, m.ID, g.endpoint(agent))
		if err != nil {
			field := "message.metadata." + a2alink.MetadataDepthToken
			if de, ok := errors.AsType[*a2alink.DepthError](err); ok {
				field += "." + de.Field
			}
			vs := []boundary.Violation{{Field: field, Rule: "depth_token", Message: err.Error()}}
			boundary.LogRejection(ctx, g.log, boundary.A2AJSONRPC, vs)
			return nil, &rpcFault{http.StatusOK, codeInvalidParams, "Invalid params: " + logging.Scrub(boundary.Summary(vs))}
		}
		senderDepth = max(d.Depth-1, 0)
	}
	cctx := g.as(ctx, p, senderDepth)
	res, err := g.inbound.DeliverInbound(cctx, &inboundv1.DeliverInboundRequest{
		AgentId: agent, Text: messageText(m), A2AMessageId: m.ID, ContextId: m.ContextID,
	})
	if err != nil {
		return nil, err
	}
	in := res.GetInbound()
	g.log.InfoContext(ctx, "a2a.message_delivered", "agent", agent, "sender", in.GetSender(), "task_id", in.GetTaskId(), "depth", in.GetDepth())
	return g.task(in, m, nil), nil
}

func (g *Door) getTask(ctx context.Context, p *identity.Principal, agent string, params *a2a.TaskQueryParams) (any, error) {
	cctx := g.as(ctx, p, 0)
	res, err := g.inbound.GetInbound(cctx, &inboundv1.GetInboundRequest{TaskId: string(params.ID)})
	if err != nil {
		return nil, err
	}
	if res.GetInbound().GetAgentId() != agent {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("task not found"))
	}
	return g.task(res.GetInbound(), nil, params.HistoryLength), nil
}

func (g *Door) cancelTask(ctx context.Context, p *identity.Principal, agent string, params *a2a.TaskIDParams) (any, error) {
	cctx := g.as(ctx, p, 0)
	cur, err := g.inbound.GetInbound(cctx, &inboundv1.GetInboundRequest{TaskId: string(params.ID)})
	if err != nil {
		return nil, err
	}
	if cur.GetInbound().GetAgentId() != agent {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("task not found"))
	}
	res, err := g.inbound.CancelInbound(cctx, &inboundv1.CancelInboundRequest{TaskId: string(params.ID)})
	if err != nil {
		return nil, err
	}
	return g.task(res.GetInbound(), nil, nil), nil
}

// task is an inbound task as A2A shows it: the sender's message in its
// history (with metadata: the stored message, thread and depth), and once
// the agent answered, the answer as the status message and an artifact.
func (g *Door) task(in *inboundv1.Inbound, sent *a2a.Message, historyLength *int) *a2a.Task {
	user := &a2a.Message{ID: in.GetA2AMessageId(), Role: a2a.MessageRoleUser, Parts: a2a.ContentParts{a2a.TextPart{Text: in.GetText()}},
		TaskID: a2a.TaskID(in.GetTaskId()), ContextID: in.GetContextId()}
	if sent != nil {
		user.Metadata = sent.Metadata
	}
	t := &a2a.Task{
		ID:        a2a.TaskID(in.GetTaskId()),
		ContextID: in.GetContextId(),
		History:   []*a2a.Message{user},
		Metadata: map[string]any{a2alink.DepthExtension: map[string]any{
			"depth": in.GetDepth(), "message_id": in.GetMessageId(), "thread_id": in.GetThreadId(), "agent": in.GetAgentId(), "sender": in.GetSender(),
		}},
	}
	at := in.GetUpdateTime().AsTime()
	t.Status = a2a.TaskStatus{State: a2a.TaskStateWorking, Timestamp: &at}
	switch in.GetStatus() {
	case inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED:
		answer := &a2a.Message{ID: in.GetAnswerMessageId(), Role: a2a.MessageRoleAgent, Parts: a2a.ContentParts{a2a.TextPart{Text: in.GetAnswer()}},
			TaskID: t.ID, ContextID: t.ContextID}
		t.Status = a2a.TaskStatus{State: a2a.TaskStateCompleted, Message: answer, Timestamp: &at}
		t.History = append(t.History, answer)
		t.Artifacts = []*a2a.Artifact{{ID: a2a.ArtifactID("answer-" + in.GetAnswerMessageId()), Name: "answer", Parts: answer.Parts}}
	case inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED:
		t.Status = a2a.TaskStatus{State: a2a.TaskStateCanceled, Timestamp: &at}
	}
	if historyLength != nil && *historyLength < len(t.History) {
		t.History = t.History[len(t.History)-*historyLength:]
	}
	return t
}

// fault maps a failed call to its JSON-RPC error: a task the sender does
// not have is -32001, one that cannot be cancelled -32002, a refusal of
// the mesh (the depth limit) -32000 with its words; anything else is
// logged and answered -32603 without details.
func (g *Door) fault(ctx context.Context, method string, err error) rpcFault {
	if f, ok := errors.AsType[*rpcFault](err); ok {
		return *f
	}
	var ce *connect.Error
	if errors.As(err, &ce) && connect.IsWireError(ce) {
		switch ce.Code() {
		case connect.CodeNotFound:
			return rpcFault{http.StatusOK, codeTaskNotFound, "Task not found"}
		case connect.CodeFailedPrecondition:
			if method == methodTasksCancel {
				return rpcFault{http.StatusOK, codeTaskNotCancelable, "Task cannot be canceled: " + ce.Message()}
			}
			return rpcFault{http.StatusOK, codeServerError, ce.Message()}
		case connect.CodeAlreadyExists, connect.CodePermissionDenied:
			return rpcFault{http.StatusOK, codeServerError, ce.Message()}
		case connect.CodeInvalidArgument:
			return rpcFault{http.StatusOK, codeInvalidParams, "Invalid params: " + ce.Message()}
		}
	}
	g.log.ErrorContext(ctx, "a2a.request_failed", "method", method, "error", err)
	return rpcFault{http.StatusOK, httpguard.CodeInternalError, "Internal error: the mesh could not serve the request; try again"}
}
