package a2adoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	a2a03 "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/logging"
)

// The door's boundary. A request is read twice: first here, as the type
// its binding and method name — the envelope, then the params (a JSON-RPC
// request), the body (a REST request) — so that what does not parse is
// refused with the field at fault and one boundary.validation_failed event
// under the binding's label; then by the SDK's transport, which hands the
// door's handler the typed request. What parses but breaks a rule of the
// mesh (no text, too much text, an agent's message) is the handler's to
// refuse (checkSend, checkTaskID), the same way on every binding. A gRPC
// request arrives typed; the interceptor logs what the SDK cannot convert.

// Limits of what an inbound request may carry.
const (
	maxText     = 10000
	maxID       = 256
	maxPageSize = 100
)

// fault is a JSON-RPC refusal.
type fault struct {
	id   json.RawMessage
	code int
	msg  string
}

// paramsOf10 and paramsOf03 are the params types of the JSON-RPC methods of
// A2A 1.0 and 0.3; a method not listed is the transport's to answer.
var paramsOf10 = map[string]func() any{
	"SendMessage":                      func() any { return &a2a.SendMessageRequest{} },
	"SendStreamingMessage":             func() any { return &a2a.SendMessageRequest{} },
	"GetTask":                          func() any { return &a2a.GetTaskRequest{} },
	"ListTasks":                        func() any { return &a2a.ListTasksRequest{} },
	"CancelTask":                       func() any { return &a2a.CancelTaskRequest{} },
	"SubscribeToTask":                  func() any { return &a2a.SubscribeToTaskRequest{} },
	"CreateTaskPushNotificationConfig": func() any { return &a2a.PushConfig{} },
	"GetTaskPushNotificationConfig":    func() any { return &a2a.GetTaskPushConfigRequest{} },
	"ListTaskPushNotificationConfigs":  func() any { return &a2a.ListTaskPushConfigRequest{} },
	"DeleteTaskPushNotificationConfig": func() any { return &a2a.DeleteTaskPushConfigRequest{} },
}

var paramsOf03 = map[string]func() any{
	"message/send":                        func() any { return &a2a03.MessageSendParams{} },
	"message/stream":                      func() any { return &a2a03.MessageSendParams{} },
	"tasks/get":                           func() any { return &a2a03.TaskQueryParams{} },
	"tasks/cancel":                        func() any { return &a2a03.TaskIDParams{} },
	"tasks/resubscribe":                   func() any { return &a2a03.TaskIDParams{} },
	"tasks/pushNotificationConfig/set":    func() any { return &a2a03.TaskPushConfig{} },
	"tasks/pushNotificationConfig/get":    func() any { return &a2a03.GetTaskPushConfigParams{} },
	"tasks/pushNotificationConfig/list":   func() any { return &a2a03.ListTaskPushConfigParams{} },
	"tasks/pushNotificationConfig/delete": func() any { return &a2a03.DeleteTaskPushConfigParams{} },
}

// parseJSONRPC reads a JSON-RPC request at the a2a.jsonrpc boundary: the
// envelope (a malformed one is -32700 or -32600), then the params of its
// method as that method's type in version; params that do not fit are
// -32602, logged.
func (g *Door) parseJSONRPC(ctx context.Context, body []byte, version string) *fault {
	t := bytes.TrimSpace(body)
	if !json.Valid(t) {
		return &fault{nil, httpguard.CodeParseError, "Parse error: the body is not JSON"}
	}
	var env struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  string          `json:"method"`
		Params  json.RawMessage `json:"params"`
	}
	if len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &env) != nil {
		return &fault{nil, httpguard.CodeInvalidRequest, "Invalid request: the body must be one JSON-RPC request object (batches are not served)"}
	}
	id := plainID(env.ID)
	if env.JSONRPC != "2.0" || id == nil || env.Method == "" {
		return &fault{id, httpguard.CodeInvalidRequest, `Invalid request: want "jsonrpc": "2.0", a string or number "id" and a "method"`}
	}
	params := paramsOf10
	if version == a2alink.Version03 {
		params = paramsOf03
	}
	mk, ok := params[env.Method]
	if !ok {
		return nil
	}
	v := mk()
	vs := decodeParams(env.Params, v)
	if vs == nil {
		// A message to send is checked whole here, so that a stream is
		// refused before it starts, as a plain JSON-RPC error.
		switch p := v.(type) {
		case *a2a03.MessageSendParams:
			req, err := a2av0.ToV1SendMessageRequest(p)
			if err != nil {
				vs = []boundary.Violation{{Field: "message", Rule: "a2a.message", Message: err.Error()}}
			} else {
				vs = checkSend(req)
			}
		case *a2a.SendMessageRequest:
			vs = checkSend(p)
		}
	}
	if vs != nil {
		boundary.LogRejection(ctx, g.log, bindingJSONRPC, vs)
		return &fault{id, -32602, "Invalid params: " + logging.Scrub(boundary.Summary(vs))}
	}
	return nil
}

// decodeParams decodes params (an object, or none) into v, naming the
// field a type error is in.
func decodeParams(params json.RawMessage, v any) []boundary.Violation {
	t := bytes.TrimSpace(params)
	if len(t) == 0 || string(t) == "null" {
		return nil
	}
	if t[0] != '{' {
		return []boundary.Violation{{Rule: "params.object", Message: "params must be an object"}}
	}
	return decodeObject(t, v)
}

func decodeObject(t []byte, v any) []boundary.Violation {
	if err := json.Unmarshal(t, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return []boundary.Violation{{Field: te.Field, Rule: "type", Message: fmt.Sprintf("must be a %s, not a %s", te.Type, te.Value)}}
		}
		return []boundary.Violation{{Rule: "type", Message: httpguard.Truncate(err.Error(), 200)}}
	}
	return nil
}

// parseREST reads the body of a REST request at the a2a.rest boundary:
// a message to send, or a push config.
func (g *Door) parseREST(ctx context.Context, path string, body []byte) error {
	var v any
	switch {
	case path == "/message:send" || path == "/message:stream":
		v = &a2a.SendMessageRequest{}
	case strings.HasPrefix(path, "/tasks/") && strings.HasSuffix(path, "/pushNotificationConfigs"):
		v = &a2a.PushConfig{}
	default:
		return nil
	}
	t := bytes.TrimSpace(body)
	var vs []boundary.Violation
	if len(t) == 0 || t[0] != '{' {
		vs = []boundary.Violation{{Rule: "body.object", Message: "the body must be a JSON object"}}
	} else {
		vs = decodeObject(t, v)
	}
	if vs != nil {
		boundary.LogRejection(ctx, g.log, bindingREST, vs)
		return a2a.NewError(a2a.ErrInvalidParams, "Invalid params: "+logging.Scrub(boundary.Summary(vs)))
	}
	return nil
}

// parseListQuery reads the query of a REST ListTasks at the a2a.rest
// boundary, keeping what the SDK's REST transport drops.
func (g *Door) parseListQuery(ctx context.Context, r *http.Request) (*a2a.ListTasksRequest, error) {
	q := r.URL.Query()
	out := &a2a.ListTasksRequest{}
	var vs []boundary.Violation
	integer := func(name string, set func(int)) {
		if s := q.Get(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				vs = append(vs, boundary.Violation{Field: name, Rule: "int", Message: "must be an integer"})
				return
			}
			set(n)
		}
	}
	integer("pageSize", func(n int) { out.PageSize = n })
	integer("historyLength", func(n int) { out.HistoryLength = &n })
	if s := q.Get("statusTimestampAfter"); s != "" {
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			vs = append(vs, boundary.Violation{Field: "statusTimestampAfter", Rule: "timestamp", Message: "must be an RFC 3339 time"})
		} else {
			out.StatusTimestampAfter = &at
		}
	}
	if s := q.Get("includeArtifacts"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			vs = append(vs, boundary.Violation{Field: "includeArtifacts", Rule: "bool", Message: "must be true or false"})
		}
		out.IncludeArtifacts = b
	}
	if vs != nil {
		boundary.LogRejection(ctx, g.log, bindingREST, vs)
		return nil, a2a.NewError(a2a.ErrInvalidParams, "Invalid params: "+boundary.Summary(vs))
	}
	return out, nil
}

// reject refuses a request that breaks a rule of the mesh: one
// boundary.validation_failed event under the call's binding, and the
// binding's invalid-params error.
func (g *Door) reject(ctx context.Context, vs []boundary.Violation) error {
	c := callOf(ctx)
	c.rejected = true
	boundary.LogRejection(ctx, g.log, c.binding, vs)
	return a2a.NewError(a2a.ErrInvalidParams, "Invalid params: "+logging.Scrub(boundary.Summary(vs)))
}

// checkSend checks what a message to send must carry: a user message with
// an id and text within bounds, and a depth token that is a string.
func checkSend(req *a2a.SendMessageRequest) []boundary.Violation {
	m := req.Message
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
	case len(m.ID) > maxID:
		add("messageId", "string.max_len", fmt.Sprintf("at most %d bytes", maxID))
	}
	if m.Role != a2a.MessageRoleUser {
		add("role", "const", "must be the user's (ROLE_USER)")
	}
	if len(m.Parts) == 0 {
		add("parts", "repeated.min_items", "at least one part")
	}
	if len(m.TaskID) > maxID || len(m.ContextID) > maxID {
		add("taskId", "string.max_len", fmt.Sprintf("taskId and contextId: at most %d bytes", maxID))
	}
	// A message of other parts is valid A2A the agents do not take
	// (ContentTypeNotSupported, after the boundary).
	text, allText := messageText(m)
	if n := utf8.RuneCountInString(text); n > maxText {
		add("parts", "text.max_len", fmt.Sprintf("the text is %d characters; at most %d", n, maxText))
	} else if len(m.Parts) > 0 && allText && strings.TrimSpace(text) == "" {
		add("parts", "text.min_len", "the text is empty")
	}
	if v, ok := m.Metadata[a2alink.MetadataDepthToken]; ok {
		if _, isString := v.(string); !isString {
			add("metadata."+a2alink.MetadataDepthToken, "type", "must be a string (a signed depth token)")
		}
	}
	if h := req.Config; h != nil && h.HistoryLength != nil && *h.HistoryLength < 0 {
		vs = append(vs, boundary.Violation{Field: "configuration.historyLength", Rule: "int.gte", Message: "must be 0 or more"})
	}
	return vs
}

// messageText is the message's text parts, joined, and whether it has
// only text parts.
func messageText(m *a2a.Message) (string, bool) {
	var parts []string
	all := true
	for _, p := range m.Parts {
		if t, ok := p.Content.(a2a.Text); ok {
			parts = append(parts, string(t))
		} else {
			all = false
		}
	}
	return strings.Join(parts, "\n"), all
}

func checkTaskID(field string, id a2a.TaskID) []boundary.Violation {
	switch {
	case id == "":
		return []boundary.Violation{{Field: field, Rule: "required", Message: "value is required"}}
	case len(id) > maxID:
		return []boundary.Violation{{Field: field, Rule: "string.max_len", Message: fmt.Sprintf("at most %d bytes", maxID)}}
	}
	return nil
}

func checkHistory(h *int) []boundary.Violation {
	if h != nil && *h < 0 {
		return []boundary.Violation{{Field: "historyLength", Rule: "int.gte", Message: "must be 0 or more"}}
	}
	return nil
}
