package a2adoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	a2agrpc "github.com/a2aproject/a2a-go/v2/a2agrpc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

func TestA2AParamsPassTheTypedBoundary(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	long := strings.Repeat("x", 10001)
	for _, tc := range []struct {
		name, body string
		header     http.Header
		code       int
		rejected   bool // a params rejection: one boundary event
	}{
		{"not JSON", `{"jsonrpc":`, nil, -32700, false},
		{"a batch", `[` + sendBody(1, textMessage("m", "hi")) + `]`, nil, -32600, false},
		{"no id", `{"jsonrpc":"2.0","method":"message/send","params":{}}`, nil, -32600, false},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"tasks/list","params":{}}`, nil, -32601, false},
		{"a 0.3 method in 1.0", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, v10, -32601, false},
		{"an unknown version", send10(1, "m", "hi"), http.Header{"A2A-Version": {"9.9"}}, -32009, false},
		{"messageId a number", sendBody(1, `{"kind":"message","messageId":7,"role":"user","parts":[]}`), nil, -32602, true},
		{"messageId a number, 1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":7}}}`, v10, -32602, true},
		{"no message", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":{}}`, nil, -32602, true},
		{"stream without a message", `{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{}}`, nil, -32602, true},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"message/send","params":[1]}`, nil, -32602, true},
		{"an agent's message", sendBody(1, `{"kind":"message","messageId":"m","role":"agent","parts":[{"kind":"text","text":"hi"}]}`), nil, -32602, true},
		{"no parts", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[]}`), nil, -32602, true},
		{"an unknown part", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"video"}]}`), nil, -32602, true},
		{"an unknown part, 1.0", `{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"video":1}]}}}`, v10, -32602, true},
		{"too much text", sendBody(1, textMessage("m", long)), nil, -32602, true},
		{"a depth token that is no string", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}],"metadata":{"`+a2alink.MetadataDepthToken+`":3}}`), nil, -32602, true},
		{"tasks/get without an id", `{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{}}`, nil, -32602, true},
		{"tasks/cancel with a numeric id", `{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":5}}`, nil, -32602, true},
		{"a push config without a url", `{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{"taskId":"tsk_1"}}`, v10, -32602, true},
		{"a page too large", `{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":500}}`, v10, -32602, true},
		{"a file", sendBody(1, `{"kind":"message","messageId":"m","role":"user","parts":[{"kind":"file","file":{"uri":"https://example.com/a.pdf"}}]}`), nil, -32005, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(f.logs.Events("boundary.validation_failed"))
			status, a := f.rpc(t, "bob", tc.body, tc.header)
			if status != http.StatusOK || a.code() != tc.code {
				t.Errorf("answer %d %+v, want 200 with error %d", status, a.Error, tc.code)
			}
			events := f.logs.Events("boundary.validation_failed")[before:]
			want := 0
			if tc.rejected {
				want = 1
			}
			if len(events) != want || (want == 1 && events[0]["boundary"] != "a2a.jsonrpc") {
				t.Errorf("boundary events %v, want %d at a2a.jsonrpc", events, want)
			}
		})
	}
	if n := f.remote.count(); n != 0 {
		t.Errorf("%d messages delivered from refused requests", n)
	}
	// The answer carries the request's id, a number or a string.
	if _, a := f.rpc(t, "bob", `{"jsonrpc":"2.0","id":"abc","method":"tasks/get","params":{}}`, nil); string(a.ID) != `"abc"` {
		t.Errorf("error answer id %s, want \"abc\"", a.ID)
	}
	// The endpoint with a slash after the agent is the same endpoint (the
	// base URL `toolmesh up` prints, to resolve the card's path against).
	if code, a := f.rpc(t, "bob/", sendBody(7, textMessage("m-slash", "hi")), nil); code != http.StatusOK || a.Error != nil {
		t.Errorf("POST /a2a/agents/bob/ = %d %+v, want the message sent", code, a)
	}
	if resp, err := http.Get(f.base + "/a2a/agents/bob/"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /a2a/agents/bob/ = %v, %v; want the card", resp, err)
	} else {
		resp.Body.Close()
	}
	// Content-Type must be JSON.
	req, _ := http.NewRequest(http.MethodPost, f.base+"/a2a/agents/bob", strings.NewReader(sendBody(1, textMessage("m", "hi"))))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain body: %d, want 415", resp.StatusCode)
	}

	// REST: its own error shape (AIP-193), never a 5xx, and one event at
	// a2a.rest.
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
	}{
		{"a body that is not a message", "POST", "/message:send", `{"message":{"messageId":7}}`, 400},
		{"an agent's message", "POST", "/message:send", `{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"hi"}]}}`, 400},
		{"a history length that is no number", "GET", "/tasks?historyLength=many", "", 400},
	} {
		before := len(f.logs.Events("boundary.validation_failed"))
		req, _ := http.NewRequest(tc.method, f.base+"/a2a/agents/bob/rest"+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error struct{ Status string } }
		_ = jsonDecode(resp, &body)
		events := f.logs.Events("boundary.validation_failed")[before:]
		if resp.StatusCode != tc.status || body.Error.Status != "INVALID_ARGUMENT" || len(events) != 1 || events[0]["boundary"] != "a2a.rest" {
			t.Errorf("REST %s: %d %+v, events %v; want %d INVALID_ARGUMENT and one a2a.rest event", tc.name, resp.StatusCode, body, events, tc.status)
		}
	}
}

// clientOver opens an A2A 1.0 client (a2a-go/v2's own) to bob over one
// binding, as the card names it.
func (f *a2aFixture) clientOver(t *testing.T, binding a2a.TransportProtocol) *a2aclient.Client {
	t.Helper()
	card, err := a2alink.FetchCard(t.Context(), http.DefaultClient, f.base+"/a2a/agents/bob/")
	if err != nil {
		t.Fatal(err)
	}
	var iface *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i.ProtocolBinding == binding && i.ProtocolVersion == a2a.Version {
			iface = i
		}
	}
	c, err := a2aclient.NewFromEndpoints(t.Context(), []*a2a.AgentInterface{iface}, a2aclient.WithDefaultsDisabled(),
		a2aclient.WithJSONRPCTransport(nil), a2aclient.WithRESTTransport(nil), a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Destroy() })
	return c
}

func textSend(id, text string) *a2a.SendMessageRequest {
	m := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(text))
	m.ID = id
	return &a2a.SendMessageRequest{Message: m, Config: &a2a.SendMessageConfig{ReturnImmediately: true}}
}

// TestA2ATasksOverEachBinding: a client of each 1.0 binding sends, gets,
// lists and cancels, and registers a push config; a task it does not have
// is not found, one answered cannot be cancelled.
func TestA2ATasksOverEachBinding(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolGRPC} {
		t.Run(string(binding), func(t *testing.T) {
			c := f.clientOver(t, binding)
			ctx := t.Context()
			res, err := c.SendMessage(ctx, textSend("m-"+string(binding), "hello bob over "+string(binding)))
			if err != nil {
				t.Fatal(err)
			}
			task, ok := res.(*a2a.Task)
			if !ok || task.Status.State != a2a.TaskStateWorking || len(task.History) != 1 {
				t.Fatalf("SendMessage = %#v, want a working task", res)
			}
			d := f.remote.lastDelivery()
			// Without a depth token a message starts a new chain: its
			// sender is at depth 0. In development mode the sender is the
			// local caller.
			if d.caller.Agent != "a2a-local" || d.caller.Depth != 0 || !d.caller.HasRole(mesh.RoleService) || d.req.GetAgentId() != "bob" {
				t.Errorf("delivered %+v as %+v", d.req, d.caller)
			}
			zero := 0
			if got, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: task.ID, HistoryLength: &zero}); err != nil || got.ID != task.ID || len(got.History) != 0 {
				t.Errorf("GetTask with historyLength 0 = %+v, %v", got, err)
			}
			list, err := c.ListTasks(ctx, &a2a.ListTasksRequest{Status: a2a.TaskStateWorking})
			if err != nil || list.TotalSize == 0 || list.Tasks[0].ID != task.ID {
				t.Errorf("ListTasks = %+v, %v; want the new task first", list, err)
			}
			pc, err := c.CreateTaskPushConfig(ctx, &a2a.PushConfig{TaskID: task.ID, ID: "hook", URL: "https://hooks.example.com/a2a", Token: "tok"})
			if err != nil || pc.ID != "hook" || pc.TaskID != task.ID {
				t.Errorf("CreateTaskPushConfig = %+v, %v", pc, err)
			}
			if cs, err := c.ListTaskPushConfigs(ctx, &a2a.ListTaskPushConfigRequest{TaskID: task.ID}); err != nil || len(cs) != 1 || cs[0].URL != "https://hooks.example.com/a2a" {
				t.Errorf("ListTaskPushConfigs = %v, %v", cs, err)
			}
			if got, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: task.ID}); err != nil || got.Status.State != a2a.TaskStateCanceled {
				t.Errorf("CancelTask = %+v, %v; want canceled", got, err)
			}
			if _, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: "tsk_404"}); !errors.Is(err, a2a.ErrTaskNotFound) {
				t.Errorf("GetTask of an unknown task: %v, want TaskNotFound", err)
			}
			res, err = c.SendMessage(ctx, textSend("m2-"+string(binding), "answer me"))
			if err != nil {
				t.Fatal(err)
			}
			f.remote.answer(string(res.(*a2a.Task).ID), "42")
			done, err := c.GetTask(ctx, &a2a.GetTaskRequest{ID: res.(*a2a.Task).ID})
			if err != nil || done.Status.State != a2a.TaskStateCompleted || a2alink.Text(done.Artifacts[0].Parts) != "42" {
				t.Errorf("GetTask after the answer = %+v, %v; want completed with the answer", done, err)
			}
			if _, err := c.CancelTask(ctx, &a2a.CancelTaskRequest{ID: done.ID}); !errors.Is(err, a2a.ErrTaskNotCancelable) {
				t.Errorf("CancelTask of a completed task: %v, want TaskNotCancelable", err)
			}
		})
	}
	// gRPC names the agent by the request's tenant: none is refused at the
	// a2a.grpc boundary.
	conn, err := grpc.NewClient(strings.TrimPrefix(f.base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	before := len(f.logs.Events("boundary.validation_failed"))
	_, err = a2agrpc.NewGRPCTransport(conn).GetTask(t.Context(), a2aclient.ServiceParams{}, &a2a.GetTaskRequest{ID: "tsk_1"})
	events := f.logs.Events("boundary.validation_failed")[before:]
	if !errors.Is(err, a2a.ErrInvalidParams) || len(events) != 1 || events[0]["boundary"] != "a2a.grpc" {
		t.Errorf("gRPC without a tenant: %v, events %v; want invalid params and one a2a.grpc event", err, events)
	}
	_, err = a2agrpc.NewGRPCTransport(conn).GetTask(t.Context(), a2aclient.ServiceParams{"A2A-Version": {"0.9"}}, &a2a.GetTaskRequest{Tenant: "bob", ID: "tsk_1"})
	if status.Code(errors.Unwrap(err)) != codes.Unimplemented && !strings.Contains(err.Error(), "Version not supported") {
		t.Errorf("gRPC at version 0.9: %v, want version not supported", err)
	}
}

// TestA2AStreamsAndResumesFromAnyEvent: a stream carries the task, then
// its events with their ids; a subscriber naming the last id it has gets
// every later event, none twice, also after the task ended.
func TestA2AStreamsAndResumesFromAnyEvent(t *testing.T) {
	t.Parallel()
	f := newA2AFixture(t, nil)
	for _, binding := range []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON, a2a.TransportProtocolGRPC} {
		t.Run(string(binding), func(t *testing.T) {
			c := f.clientOver(t, binding)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var first *a2a.Task
			for ev, err := range c.SendStreamingMessage(ctx, textSend("s-"+string(binding), "stream me")) {
				if err != nil {
					t.Fatal(err)
				}
				first, _ = ev.(*a2a.Task)
				break // the cut: the client leaves after the snapshot
			}
			if first == nil || first.Status.State != a2a.TaskStateWorking {
				t.Fatalf("the stream's first event is %#v, want the working task", first)
			}
			last, _ := first.Metadata[a2alink.EventsExtension].(map[string]any)["last_event_id"].(string)
			if last != string(first.ID)+"/1" {
				t.Errorf("the snapshot's last_event_id = %q, want %s/1", last, first.ID)
			}
			f.remote.answer(string(first.ID), "streamed answer")
			// Resubscribe after the cut, naming the last event seen.
			rctx := a2aclient.AttachServiceParams(t.Context(), a2aclient.ServiceParams{a2alink.ParamLastEventID: {last}})
			var ids []string
			var kinds []string
			for ev, err := range c.SubscribeToTask(rctx, &a2a.SubscribeToTaskRequest{ID: first.ID}) {
				if err != nil {
					t.Fatal(err)
				}
				switch e := ev.(type) {
				case *a2a.Task:
					kinds = append(kinds, "task:"+string(e.Status.State))
				case *a2a.TaskArtifactUpdateEvent:
					kinds = append(kinds, "artifact:"+a2alink.Text(e.Artifact.Parts))
					ids = append(ids, e.Metadata[a2alink.EventsExtension].(map[string]any)["id"].(string))
				case *a2a.TaskStatusUpdateEvent:
					kinds = append(kinds, "status:"+string(e.Status.State))
					ids = append(ids, e.Metadata[a2alink.EventsExtension].(map[string]any)["id"].(string))
				}
			}
			want := "[task:TASK_STATE_COMPLETED artifact:streamed answer status:TASK_STATE_COMPLETED]"
			if got := strings.Join(kinds, " "); "["+got+"]" != want {
				t.Errorf("resubscribed stream: %s, want %s", got, want)
			}
			if strings.Join(ids, ",") != string(first.ID)+"/2,"+string(first.ID)+"/3" {
				t.Errorf("event ids %v, want 2 and 3 of the task", ids)
			}
			// Without an event to resume from, an ended task cannot be
			// subscribed to: it is read.
			for _, err := range c.SubscribeToTask(t.Context(), &a2a.SubscribeToTaskRequest{ID: first.ID}) {
				if !errors.Is(err, a2a.ErrUnsupportedOperation) {
					t.Errorf("subscribing to an ended task: %v, want UnsupportedOperation", err)
				}
				break
			}
		})
	}
}

func jsonDecode(resp *http.Response, v any) error {
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
