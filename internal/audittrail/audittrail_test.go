package audittrail_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestArgumentsDigestIsPinned(t *testing.T) {
	// The expected digests are SHA-256 of the canonical JSON shown, computed
	// with Python's hashlib.
	for _, tc := range []struct {
		name, want string
		digest     func() (string, error)
	}{
		{`{"description":"rotate the keys","priority":"TASK_PRIORITY_HIGH"}`, "sha256:dd1462eaee90d0448b9e3d66bcee39996dd339492c12e4a54b16bdd4a54e5163",
			func() (string, error) {
				return audittrail.ArgumentsDigest(&tasksv1.CreateRequest{Description: "rotate the keys", Priority: tasksv1.TaskPriority_TASK_PRIORITY_HIGH})
			}},
		{`{} (zero values are left out)`, "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
			func() (string, error) { return audittrail.ArgumentsDigest(&tasksv1.ListRequest{Offset: 0, Limit: 0}) }},
		{`"9007199254740993" (an int64 travels as a string)`, "sha256:dacffa2a18f34cc82e20f351e91f6b2116373fd0310870dacb062ddef9128684",
			func() (string, error) { return audittrail.ArgumentsDigest(wrapperspb.Int64(9007199254740993)) }},
	} {
		got, err := tc.digest()
		if err != nil || got != tc.want {
			t.Errorf("digest of %s = %s (err %v), want %s", tc.name, got, err, tc.want)
		}
	}
}

func TestDigestIgnoresLayoutButNotData(t *testing.T) {
	a, err := audittrail.JSONDigest([]byte(`{"b": [1, 2.50], "a": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := audittrail.JSONDigest([]byte("{\n  \"a\": \"x\",\n  \"b\": [1.0, 2.5]\n}"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("same data, other layout: digests %s and %s differ", a, b)
	}
	c, _ := audittrail.JSONDigest([]byte(`{"a":"x","b":[2.5,1]}`))
	if c == a {
		t.Error("reordering an array left the digest unchanged")
	}
	big1, _ := audittrail.ArgumentsDigest(wrapperspb.Int64(9007199254740993))
	big2, _ := audittrail.ArgumentsDigest(wrapperspb.Int64(9007199254740992))
	if big1 == big2 {
		t.Error("two int64 values above 2^53 share a digest: they were rounded")
	}
	if _, err := audittrail.JSONDigest([]byte(`{"amount":9007199254740993}`)); err == nil {
		t.Error("JSONDigest accepted an integer a double would round")
	}
}

func TestRequestCarriesTheEntry(t *testing.T) {
	args := &tasksv1.CancelRequest{TaskId: "tsk_00000000000000000000000000", Reason: "obsolete"}
	req, err := audittrail.Request(audittrail.Entry{CallID: "mcp-1", Actor: "owner", Tool: "tasks_cancel", Reason: "cleanup", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := audittrail.ArgumentsDigest(args)
	if req.GetCallId() != "mcp-1" || req.GetActor() != "owner" || req.GetTool() != "tasks_cancel" || req.GetReason() != "cleanup" ||
		req.GetArgsDigest() != digest || req.GetOutcome() != auditv1.Outcome_OUTCOME_SUCCEEDED {
		t.Errorf("Request = %v", req)
	}
}

// fakeAudit answers Append with the queued errors, then success, and
// remembers what each call carried.
type fakeAudit struct {
	auditv1connect.UnimplementedAuditServiceHandler
	errs  []error
	calls []mesh.Call
}

func (f *fakeAudit) Append(ctx context.Context, req *auditv1.AppendRequest) (*auditv1.AppendResponse, error) {
	f.calls = append(f.calls, mesh.FromContext(ctx))
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return nil, err
	}
	return &auditv1.AppendResponse{Record: &auditv1.Record{Seq: 1, CallId: req.GetCallId()}}, nil
}

func TestRecorderRetriesTransientFailuresOnly(t *testing.T) {
	entry := audittrail.Entry{CallID: "mcp-7", Actor: "owner", Tool: "tasks_cancel", Reason: "cleanup", Arguments: &tasksv1.CancelRequest{}}
	opts := audittrail.RecorderOptions{Attempts: 3, Backoff: time.Millisecond}

	flaky := &fakeAudit{errs: []error{
		connect.NewError(connect.CodeUnavailable, errors.New("down")),
		connect.NewError(connect.CodeDeadlineExceeded, errors.New("slow")),
	}}
	r, err := audittrail.NewRecorder(flaky, opts).Record(context.Background(), entry)
	if err != nil || r.GetCallId() != "mcp-7" {
		t.Fatalf("Record after two transient failures = %v, %v; want the record", r, err)
	}
	if len(flaky.calls) != 3 {
		t.Errorf("%d attempts, want 3", len(flaky.calls))
	}
	for _, c := range flaky.calls {
		if c.Caller.Subject != audittrail.EdgeSubject || c.IdempotencyKey != "mcp-7" {
			t.Errorf("attempt carried %+v, want subject %s and the call id as idempotency key", c, audittrail.EdgeSubject)
		}
	}

	refused := &fakeAudit{errs: []error{connect.NewError(connect.CodePermissionDenied, errors.New("no"))}}
	if _, err := audittrail.NewRecorder(refused, opts).Record(context.Background(), entry); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("Record refused: err %v, want permission_denied", err)
	}
	if len(refused.calls) != 1 {
		t.Errorf("a refused append was tried %d times, want once", len(refused.calls))
	}

	down := &fakeAudit{errs: []error{
		connect.NewError(connect.CodeUnavailable, errors.New("1")),
		connect.NewError(connect.CodeUnavailable, errors.New("2")),
		connect.NewError(connect.CodeUnavailable, errors.New("3")),
	}}
	_, err = audittrail.NewRecorder(down, opts).Record(context.Background(), entry)
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "mcp-7") || len(down.calls) != 3 {
		t.Errorf("Record with the service down: err %v after %d attempts, want unavailable naming the call after 3", err, len(down.calls))
	}
}
