// Package workflowtest is what the workers' tests share to keep a change to
// a workflow safe for its runs in flight (docs/temporal-versioning.md):
//
//   - ReplayAll replays every recorded history in a worker's testdata
//     folder against today's code; Record adds a history and never
//     overwrites one, so every history ever recorded stays a fixture (the
//     tests' -record=TAG flag, with RecordUsage, asks for new ones);
//   - CheckNames fails when a workflow or an activity is registered without
//     an explicit name;
//   - Upgrade runs a workflow on a dev server, leaves runs in flight,
//     changes the workflow, and completes those runs on the changed code.
package workflowtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
)

// Dir is where a worker package keeps its recorded histories, relative to
// the package (where its tests run).
const Dir = "testdata/histories"

// RecordUsage is the usage of the -record flag of a worker package's tests,
// whose value is the tag Record writes histories under.
const RecordUsage = "record new histories into " + Dir + " as <scenario>.<TAG>.json against a Temporal dev server (bin/temporal); " +
	"TAG names the code that records them (docs/temporal-versioning.md); an existing file is never overwritten"

// validTag is what a tag may look like: it becomes part of a file name.
var validTag = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ReplayAll replays every history in dir (*.json) against the workflows
// register adds, one subtest per file, and fails when dir holds none. A new
// file needs no code change.
//
// A history that stops at a retired change passes: the code calls
// GetVersion for one of the retired change ids with a minimum the history
// predates, and refuses the run loudly, as a retired patch must.
func ReplayAll(t *testing.T, dir string, register func(worker.WorkflowRegistry), retired ...string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no recorded histories in %s", dir)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			h, err := readHistory(f)
			if err != nil {
				t.Fatal(err)
			}
			err = Replay(h, register)
			if id, ok := RetiredChange(err, retired...); ok {
				t.Logf("the run predates the retired change %q and is refused, as it must be", id)
				return
			}
			if err != nil {
				t.Errorf("replay %s: %v", f, err)
			}
		})
	}
}

func readHistory(path string) (*historypb.History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		return nil, fmt.Errorf("read history %s: %w", path, err)
	}
	return h, nil
}

// Replay replays h against the workflows register adds, with the options
// every toolmesh worker runs with. A history of a run still open replays up
// to where it is.
func Replay(h *historypb.History, register func(worker.WorkflowRegistry)) error {
	r, err := worker.NewWorkflowReplayerWithOptions(temporalclient.ReplayerOptions())
	if err != nil {
		return err
	}
	register(r)
	return r.ReplayWorkflowHistory(sdklog.NewStructuredLogger(logging.Discard()), h)
}

// RetiredChange says whether err is the refusal of a run that predates a
// retired change: GetVersion's "removed support of version" for one of the
// change ids. It returns that id.
func RetiredChange(err error, changeIDs ...string) (string, bool) {
	if err == nil {
		return "", false
	}
	msg := err.Error()
	if !strings.Contains(msg, "removed support of version") {
		return "", false
	}
	for _, id := range changeIDs {
		if strings.Contains(msg, fmt.Sprintf("for %q changeID", id)) {
			return id, true
		}
	}
	return "", false
}

// History is the whole history of a run, open or closed.
func History(ctx context.Context, c client.Client, workflowID, runID string) (*historypb.History, error) {
	h := &historypb.History{}
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		h.Events = append(h.Events, e)
	}
	return h, nil
}

// Record adds the history of a run to Dir as <scenario>.<tag>.json.
func Record(tb testing.TB, c client.Client, tag, scenario, workflowID, runID string) {
	tb.Helper()
	h, err := History(context.Background(), c, workflowID, runID)
	if err != nil {
		tb.Fatal(err)
	}
	Add(tb, Dir, scenario, tag, h)
}

// Add writes h to dir as <scenario>.<tag>.json, in the format of `temporal
// workflow show --output json`. It never overwrites: an existing file fails
// tb, since a recorded history is kept as it was recorded.
func Add(tb testing.TB, dir, scenario, tag string, h *historypb.History) {
	tb.Helper()
	path, err := add(dir, scenario, tag, h)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("recorded %s: %d events", path, len(h.GetEvents()))
}

func add(dir, scenario, tag string, h *historypb.History) (string, error) {
	if !validTag.MatchString(tag) || !validTag.MatchString(scenario) {
		return "", fmt.Errorf("record %q under tag %q: both must match %s", scenario, tag, validTag)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, scenario+"."+tag+".json")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("%s exists: recorded histories are never overwritten; record under a new tag", path)
	}
	if err != nil {
		return "", err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// WaitIdle waits until a run has no workflow task and no activity pending:
// it waits for the outside world (an update, a signal) or a timer, or it
// has ended. It gives up when ctx ends.
func WaitIdle(ctx context.Context, c client.Client, workflowID, runID string) error {
	for {
		d, err := c.DescribeWorkflow(ctx, workflowID, runID)
		if err != nil {
			return err
		}
		if raw := d.RawResponse; raw.GetPendingWorkflowTask() == nil && len(raw.GetPendingActivities()) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s still busy: %w", workflowID, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CheckNames fails t when register adds a workflow or an activity without
// an explicit name: a function's own name, or a struct's method names,
// would become type names, and renaming the Go code would rename a type
// that runs in flight refer to.
func CheckNames(t *testing.T, register func(worker.Registry)) {
	t.Helper()
	for _, p := range Unnamed(register) {
		t.Error(p)
	}
}

// Unnamed lists what register adds without an explicit name.
func Unnamed(register func(worker.Registry)) []string {
	n := &names{}
	register(n)
	return n.problems
}

// names is a worker.Registry that notes registrations without a name. The
// embedded interface is nil: a registration it does not expect panics.
type names struct {
	worker.Registry
	problems []string
}

func (n *names) add(format string, args ...any) {
	n.problems = append(n.problems, fmt.Sprintf(format, args...))
}

func (n *names) RegisterWorkflow(w any) {
	n.add("workflow %s is registered without a name (use RegisterWorkflowWithOptions with a Name)", funcName(w))
}

func (n *names) RegisterWorkflowWithOptions(w any, o workflow.RegisterOptions) {
	if o.Name == "" {
		n.add("workflow %s is registered without a name", funcName(w))
	}
}

func (n *names) RegisterDynamicWorkflow(w any, _ workflow.DynamicRegisterOptions) {
	n.add("dynamic workflow %s: its types have no registered names", funcName(w))
}

func (n *names) RegisterActivity(a any) {
	n.add("activity %s is registered without a name (use RegisterActivityWithOptions with a Name)", funcName(a))
}

func (n *names) RegisterActivityWithOptions(a any, o activity.RegisterOptions) {
	switch {
	case reflect.ValueOf(a).Kind() != reflect.Func:
		n.add("activities of %T are registered as a struct: their method names become the type names; register each method with a Name", a)
	case o.Name == "":
		n.add("activity %s is registered without a name", funcName(a))
	}
}

func (n *names) RegisterDynamicActivity(a any, _ activity.DynamicRegisterOptions) {
	n.add("dynamic activity %s: its types have no registered names", funcName(a))
}

func funcName(f any) string {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Func {
		return fmt.Sprintf("%T", f)
	}
	if fn := runtime.FuncForPC(v.Pointer()); fn != nil {
		return fn.Name()
	}
	return fmt.Sprintf("%T", f)
}
