package elicit

import (
	"context"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// A calls-worker task's status, from how its call ended: any tool result —
// an error result too — is completed with that result; an unexpected
// failure of the service is failed, naming its error id; a cancelled
// workflow is cancelled, a stopped one failed.
func TestTaskStateOfAnEndedCall(t *testing.T) {
	internal := toolcall.Internal("x", "err_1")
	for _, c := range []struct {
		name   string
		env    *toolcall.Envelope
		status string
		result bool
	}{
		{"ok", toolcall.OK([]byte(`{}`), nil), port.TaskCompleted, true},
		{"declined", toolcall.Fail("x", toolcall.CodeDeclined, "the user declined"), port.TaskCompleted, true},
		{"invalid argument", toolcall.Fail("x", toolcall.CodeInvalidArgument, "bad"), port.TaskCompleted, true},
		{"internal", internal, port.TaskFailed, false},
	} {
		task := &port.Task{}
		settle(task, c.env)
		if task.Status != c.status || (task.Envelope != nil) != c.result {
			t.Errorf("%s: %s with result %v, want %s with result %v", c.name, task.Status, task.Envelope != nil, c.status, c.result)
		}
	}
	task := &port.Task{}
	settle(task, internal)
	if task.Error == nil || task.Error.Code != codeInternal || task.Error.Data["error_id"] != "err_1" {
		t.Errorf("an internal failure = %+v, want -32603 naming the error id", task.Error)
	}

	x := &tasks{}
	for status, want := range map[enumspb.WorkflowExecutionStatus]string{
		enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:   port.TaskCancelled,
		enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED: port.TaskFailed,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:  port.TaskFailed,
	} {
		task := &port.Task{ID: "call/x/1"}
		x.ended(context.Background(), task, status, "run")
		if task.Status != want || (want == port.TaskFailed && task.Error == nil) {
			t.Errorf("%s: %+v, want %s", status, task, want)
		}
	}
}
