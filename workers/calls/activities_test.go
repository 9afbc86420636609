package calls_test

import (
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/workers/calls"
)

// The side effect's service call gets the call's deadline (the edge's call
// timeout), so a service slower than that is cut off at it, and does not
// apply its effect, rather than running on for the activity's longer timeout.
func TestInvokeGivesTheServiceCallTheCallsDeadline(t *testing.T) {
	backend := testingsvc.NewWith(testingsvc.Options{Delays: map[string]time.Duration{"Purge": 10 * time.Second}})
	srv := servertest.Start(t, backend.Server())
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")},
		Services:   map[string]string{testingv1connect.TestingServiceName: srv.URL},
		HTTPClient: srv.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(acts.Invoke, activity.RegisterOptions{Name: calls.ActivityInvoke})
	val, err := env.ExecuteActivity(calls.ActivityInvoke, &callsv1.InvokeInput{
		Tool:           "testing_purge",
		Arguments:      `{"agent_id":"agent-1","confirm":true,"reason":"tidy up"}`,
		Caller:         &callsv1.Caller{Subject: "owner-1", Agent: "agent-1"},
		IdempotencyKey: "purge-1",
		Audit:          true,
		Timeout:        durationpb.New(200 * time.Millisecond),
	})
	if err != nil {
		t.Fatal(err)
	}
	var out callsv1.InvokeOutput
	if err := val.Get(&out); err != nil {
		t.Fatal(err)
	}
	var got toolcall.Envelope
	if err := json.Unmarshal([]byte(out.GetEnvelope()), &got); err != nil {
		t.Fatal(err)
	}
	if got.DomainCode != toolcall.CodeDeadlineExceeded {
		t.Errorf("a purge slower than the call's deadline answered %s, want %s", out.GetEnvelope(), toolcall.CodeDeadlineExceeded)
	}
	if n := backend.Executions("Purge"); n != 0 {
		t.Errorf("the purge was applied %d times after its caller's deadline, want 0", n)
	}
}
