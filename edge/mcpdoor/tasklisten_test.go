package mcpdoor_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// A client that listens for its tasks (subscriptions/listen with taskIds,
// 2026-07-28) on another replica than the one that created them hears each
// task at once and again when it changes, and the listen ends once they are
// all over; a task that is not the caller's is not honoured, and a client
// without the extension is refused.
func TestTaskStatusPushes(t *testing.T) {
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	a, b := m.Edge(t, nil), m.Edge(t, nil)
	created := wireTaskOf(t, edgetest.TaskRequest(t, a.URL, "tools/call", map[string]any{"name": "testing_wait", "arguments": map[string]any{"millis": 3000}}, edgetest.TasksCaps))

	listen := func(caps map[string]any) []byte {
		t.Helper()
		meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "subscriptions/listen", "params": map[string]any{
			"_meta": meta, "notifications": map[string]any{"taskIds": []string{created.TaskID, "call/testing_wait/0123456789abcdef"}}}})
		_, raw := edgetest.Post(t, b.URL, edgetest.ModernHeaders("subscriptions/listen"), string(body))
		return raw
	}
	type message struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	var msgs []message
	sc := bufio.NewScanner(bytes.NewReader(listen(edgetest.TasksCaps)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m message
			if err := json.Unmarshal([]byte(data), &m); err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, m)
		}
	}
	if len(msgs) < 4 || msgs[0].Method != "notifications/subscriptions/acknowledged" || msgs[len(msgs)-1].Result == nil {
		t.Fatalf("the stream = %+v, want the acknowledgement, the task's states, and the listen's answer", msgs)
	}
	var ack struct {
		Notifications struct {
			TaskIDs []string `json:"taskIds"`
		} `json:"notifications"`
	}
	if err := json.Unmarshal(msgs[0].Params, &ack); err != nil || !slices.Equal(ack.Notifications.TaskIDs, []string{created.TaskID}) {
		t.Errorf("acknowledged %s, want the caller's task only", msgs[0].Params)
	}
	var statuses []string
	var last wireTask
	for _, m := range msgs[1 : len(msgs)-1] {
		if m.Method != "notifications/tasks" {
			t.Errorf("unexpected message %+v", m)
			continue
		}
		last = wireTask{}
		if err := json.Unmarshal(m.Params, &last); err != nil || last.TaskID != created.TaskID {
			t.Errorf("notifications/tasks %s, want the task", m.Params)
		}
		statuses = append(statuses, last.Status)
	}
	if statuses[0] != "working" || statuses[len(statuses)-1] != "completed" || last.Result == nil || !strings.Contains(string(last.Result.StructuredContent), `"waited_millis"`) {
		t.Errorf("pushed %v, last %+v; want working first, completed with the result last", statuses, last)
	}

	var refused message
	if err := json.Unmarshal(edgetest.LastMessage(listen(map[string]any{})), &refused); err != nil || refused.Error == nil || refused.Error.Code != -32021 {
		t.Errorf("a listen without the extension = %+v, want -32021", refused)
	}
}
