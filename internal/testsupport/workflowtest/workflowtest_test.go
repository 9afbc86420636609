package workflowtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/proto"
)

func someWorkflow(workflow.Context) error { return nil }

type acts struct{}

func (acts) Do(context.Context) error { return nil }

func TestUnnamed(t *testing.T) {
	tests := []struct {
		name     string
		register func(worker.Registry)
		want     string // a problem names this; "" for none
	}{
		{"named", func(r worker.Registry) {
			r.RegisterWorkflowWithOptions(someWorkflow, workflow.RegisterOptions{Name: "some"})
			r.RegisterActivityWithOptions(acts{}.Do, activity.RegisterOptions{Name: "do"})
		}, ""},
		{"workflow by function name", func(r worker.Registry) { r.RegisterWorkflow(someWorkflow) }, "someWorkflow"},
		{"workflow with an empty name", func(r worker.Registry) { r.RegisterWorkflowWithOptions(someWorkflow, workflow.RegisterOptions{}) }, "someWorkflow"},
		{"activities of a struct", func(r worker.Registry) { r.RegisterActivity(&acts{}) }, "acts"},
		{"activities of a struct with a prefix", func(r worker.Registry) {
			r.RegisterActivityWithOptions(&acts{}, activity.RegisterOptions{Name: "acts."})
		}, "method names"},
		{"activity with an empty name", func(r worker.Registry) { r.RegisterActivityWithOptions(acts{}.Do, activity.RegisterOptions{}) }, "Do"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Unnamed(tt.register)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tt.want != "" && (len(got) != 1 || !strings.Contains(got[0], tt.want)):
				t.Errorf("problems %q, want one naming %q", got, tt.want)
			}
		})
	}
}

func TestRetiredChange(t *testing.T) {
	refused := errors.New(`[TMPRL1100] Workflow code removed support of version -1. for "ask-reminder" changeID. The oldest supported version is 1`)
	tests := []struct {
		name    string
		err     error
		retired []string
		want    string
	}{
		{"retired", refused, []string{"other", "ask-reminder"}, "ask-reminder"},
		{"not listed", refused, []string{"ask-reminder-fix2"}, ""},
		{"another non-determinism", errors.New(`[TMPRL1100] nondeterministic workflow: history event is ActivityTaskScheduled for "ask-reminder" changeID`), []string{"ask-reminder"}, ""},
		{"too new", errors.New(`[TMPRL1100] Workflow code is too old to support version 2 for "ask-reminder" changeID`), []string{"ask-reminder"}, ""},
		{"no error", nil, []string{"ask-reminder"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, ok := RetiredChange(tt.err, tt.retired...)
			if id != tt.want || ok != (tt.want != "") {
				t.Errorf("RetiredChange = %q, %v; want %q", id, ok, tt.want)
			}
		})
	}
}

func TestAddNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	first := &historypb.History{Events: []*historypb.HistoryEvent{{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED}}}
	path, err := add(dir, "waiting", "v1", first)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "waiting.v1.json"); path != want {
		t.Errorf("added %s, want %s", path, want)
	}
	second := &historypb.History{Events: []*historypb.HistoryEvent{{EventId: 1, EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED}, {EventId: 2}}}
	if _, err := add(dir, "waiting", "v1", second); err == nil || !strings.Contains(err.Error(), "never overwritten") {
		t.Errorf("adding the same scenario and tag again: %v, want refused", err)
	}
	got, err := readHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, first) {
		t.Errorf("the first history changed to %v", got)
	}
	if _, err := add(dir, "waiting", "v2", second); err != nil {
		t.Errorf("a new tag: %v", err)
	}
	for _, bad := range []string{"", "../up", "Has Space"} {
		if _, err := add(dir, "waiting", bad, first); err == nil {
			t.Errorf("tag %q was accepted", bad)
		}
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 2 {
		t.Errorf("%d files in the folder, want 2", len(files))
	}
}
