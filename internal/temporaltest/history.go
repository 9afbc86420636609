package temporaltest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/temporalclient"
)

// SaveHistory writes the whole history of a workflow run to path as JSON,
// the format of `temporal workflow show --output json`, for a replay test
// to check later versions of the workflow against.
func SaveHistory(tb testing.TB, c client.Client, id, runID, path string) {
	tb.Helper()
	it := c.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	all := &historypb.History{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			tb.Fatal(err)
		}
		all.Events = append(all.Events, e)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(all)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Replay replays the history recorded at path against wf, registered under
// name: an error means the workflow's code no longer matches what that run
// did, so a run in flight would fail.
func Replay(tb testing.TB, path, name string, wf any) {
	tb.Helper()
	r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{DataConverter: temporalclient.DataConverter()})
	if err != nil {
		tb.Fatal(err)
	}
	r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
	if err := r.ReplayWorkflowHistoryFromJSONFile(sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)), path); err != nil {
		tb.Errorf("replay %s: %v", path, err)
	}
}
