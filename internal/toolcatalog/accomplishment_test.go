package toolcatalog_test

import (
	"testing"

	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
)

// TestAccomplishedReadsTheRequest: completing a work task and replying in a
// thread are accomplishments of the mesh's contracts, read from the
// arguments as a client sends them (an enum by name or number); other
// moves and new threads are none.
func TestAccomplishedReadsTheRequest(t *testing.T) {
	r := build(t, tasksv1.File_toolmesh_tasks_v1_tasks_proto.Services().Get(0), messagesv1.File_toolmesh_messages_v1_messages_proto.Services().Get(0))
	cases := []struct {
		tool, args, want string
	}{
		{"tasks_update_status", `{"task_id": "t", "status": "TASK_STATUS_COMPLETED", "result": "done"}`, "task_completed"},
		{"tasks_update_status", `{"task_id": "t", "status": 3}`, "task_completed"},
		{"tasks_update_status", `{"task_id": "t", "status": "TASK_STATUS_RUNNING"}`, ""},
		{"tasks_update_status", `{"task_id": "t", "status": 2}`, ""},
		{"tasks_update_status", `{"task_id": "t"}`, ""},
		{"tasks_update_status", `not json`, ""},
		{"messages_send", `{"to": "bob", "body": "hi", "thread_id": "thr_01hzy3d5q8w9x7v6t5s4r3p2n1"}`, "message_answered"},
		{"messages_send", `{"to": "bob", "body": "hi", "threadId": "thr_01hzy3d5q8w9x7v6t5s4r3p2n1"}`, "message_answered"},
		{"messages_send", `{"to": "bob", "body": "hi", "thread_id": ""}`, ""},
		{"messages_send", `{"to": "bob", "body": "hi"}`, ""},
		{"tasks_create", `{"description": "x"}`, ""},
	}
	for _, c := range cases {
		tool, ok := r.Lookup(c.tool)
		if !ok {
			t.Fatalf("no tool %s", c.tool)
		}
		if got := tool.Accomplished([]byte(c.args)); got != c.want {
			t.Errorf("%s(%s) accomplished %q, want %q", c.tool, c.args, got, c.want)
		}
	}
}
