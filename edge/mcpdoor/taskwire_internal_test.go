package mcpdoor

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// keysOf is the top-level keys of v's JSON, sorted.
func keysOf(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// A task's wire shapes, by status, as the Tasks extension (2026-07-28) and
// the 2025-11-25 core have them: what a created task and tasks/get carry,
// and what they never carry (requestState, ttl and pollInterval in the
// extension, the related-task _meta on an inlined result).
func TestTaskWireShapes(t *testing.T) {
	at := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	base := port.Task{ID: "call/x/1", Created: at, Updated: at.Add(time.Second), TTL: &day, Message: "m"}
	withStatus := func(status string, f func(*port.Task)) *port.Task {
		t := base
		t.Status = status
		if f != nil {
			f(&t)
		}
		return &t
	}
	common := []string{"createdAt", "lastUpdatedAt", "pollIntervalMs", "resultType", "status", "statusMessage", "taskId", "ttlMs"}
	for _, c := range []struct {
		name string
		got  any
		want []string
	}{
		{"created, working", createdTask(withStatus(port.TaskWorking, nil)), common},
		{"created, input_required: its requests only in tasks/get", createdTask(withStatus(port.TaskInputRequired, func(t *port.Task) {
			t.Questions = []port.Question{{Key: "r1.admin", Message: "sure?"}}
		})), common},
		{"get, working", detailedTask(withStatus(port.TaskWorking, nil), "complete"), common},
		{"get, input_required", detailedTask(withStatus(port.TaskInputRequired, func(t *port.Task) {
			t.Questions = []port.Question{{Key: "r1.admin", Message: "sure?"}}
		}), "complete"), append(slices.Clone(common), "inputRequests")},
		{"get, completed with an error result", detailedTask(withStatus(port.TaskCompleted, func(t *port.Task) {
			t.Envelope = toolcall.Fail("x", toolcall.CodeNotFound, "gone")
		}), "complete"), append(slices.Clone(common), "result")},
		{"get, failed", detailedTask(withStatus(port.TaskFailed, nil), "complete"), append(slices.Clone(common), "error")},
		{"get, cancelled", detailedTask(withStatus(port.TaskCancelled, nil), "complete"), common},
		{"core task", toCoreTask(withStatus(port.TaskWorking, nil)), []string{"createdAt", "lastUpdatedAt", "pollInterval", "status", "statusMessage", "taskId", "ttl"}},
		{"core created", &coreCreated{Task: toCoreTask(withStatus(port.TaskWorking, nil))}, []string{"task"}},
	} {
		want := slices.Clone(c.want)
		slices.Sort(want)
		if got := keysOf(t, c.got); !slices.Equal(got, want) {
			t.Errorf("%s: keys %v, want %v", c.name, got, want)
		}
	}

	done := detailedTask(withStatus(port.TaskCompleted, func(t *port.Task) { t.Envelope = toolcall.Fail("x", toolcall.CodeNotFound, "gone") }), "complete")
	if !done.Result.IsError || done.Result.Meta[metaRelatedTask] != nil {
		t.Errorf("a completed task's result = %+v, want the error result, without related-task _meta", done.Result)
	}
	failed := detailedTask(withStatus(port.TaskFailed, nil), "complete")
	if failed.Error == nil || failed.Error.Code != codeInternalError || failed.Error.Message != "m" {
		t.Errorf("a failed task's error = %+v, want an internal error saying why", failed.Error)
	}
	if ttl := createdTask(withStatus(port.TaskWorking, nil)).TTLMs; ttl == nil || *ttl != day.Milliseconds() {
		t.Errorf("ttlMs = %v, want the day in ms", ttl)
	}
	kept := withStatus(port.TaskWorking, func(t *port.Task) { t.TTL = nil })
	if b, _ := json.Marshal(createdTask(kept)); !json.Valid(b) || !slices.Contains(keysOf(t, createdTask(kept)), "ttlMs") || createdTask(kept).TTLMs != nil {
		t.Errorf("a task kept as long as its record = %s, want ttlMs null", b)
	}
}
