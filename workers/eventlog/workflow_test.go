package eventlog_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/temporaltest"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	eventsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	outboxv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/outbox/v1"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/eventlog"
	"github.com/toolmesh/toolmesh/services/eventlog/eventlogstore"
	eventlogworker "github.com/toolmesh/toolmesh/workers/eventlog"
)

// temporalServer is the dev server of the tests that need one, started by
// the first of them.
var temporalServer temporaltest.Shared

var record = flag.String("record", "", workflowtest.RecordUsage)

func TestMain(m *testing.M) { os.Exit(temporalServer.Run(m)) }

// Every history ever recorded (testdata/histories) replays against today's
// code: a change that would break deliveries in flight fails here.
func TestReplay(t *testing.T) {
	workflowtest.ReplayAll(t, workflowtest.Dir, eventlogworker.RegisterWorkflows)
}

func TestNamesAreExplicit(t *testing.T) {
	workflowtest.CheckNames(t, func(r worker.Registry) { eventlogworker.Register(r, &eventlogworker.Activities{}) })
}

// receiver is a webhook endpoint verifying each delivery with the
// Standard Webhooks library, timestamp included; status answers the next
// deliveries (200 when it runs out).
type receiver struct {
	secret string
	mu     sync.Mutex
	status []int
	ids    []string // event ids of the verified 2xx deliveries
	bad    int      // deliveries that failed verification
	calls  int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.calls++
	wh, _ := standardwebhooks.NewWebhook(rc.secret)
	if wh.Verify(body, r.Header) != nil {
		rc.bad++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	status := 200
	if len(rc.status) > 0 {
		status, rc.status = rc.status[0], rc.status[1:]
	}
	if status < 300 {
		var b struct {
			EventID string `json:"eventId"`
		}
		_ = json.Unmarshal(body, &b)
		rc.ids = append(rc.ids, b.EventID)
	}
	w.WriteHeader(status)
}

func (rc *receiver) got() []string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return slices.Clone(rc.ids)
}

// mesh is an event log (SQLite) with webhooks on, the delivery worker on
// the shared dev server, and a relay stand-in that records events.
type deliveryMesh struct {
	c      client.Client
	events eventsv1connect.EventsServiceClient
	store  *eventlogstore.Store
}

func startMesh(t *testing.T) *deliveryMesh {
	t.Helper()
	c := workflowtest.Dial(t, temporalServer.Server(t))
	types, err := toolcatalog.EventTypes(toolcatalog.Contracts())
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, seal.KeySize)
	_, _ = rand.Read(key)
	sealer, err := seal.New(key, eventlog.SealPurpose)
	if err != nil {
		t.Fatal(err)
	}
	st := sqldbtest.OpenStore(t, sqldbtest.SQLite().Open(t), eventlogstore.Open)
	svc, err := eventlog.New(st, eventlog.Config{Types: types, Webhooks: eventlog.Webhooks{Sealer: sealer, AllowLoopback: true,
		Deliveries: eventlog.NewTemporalDeliveries(c)}})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc.Registration())
	events := meshclient.New(meshclient.Config{HTTP: srv.Client(), Signer: servertest.MeshSigner()}, eventsv1connect.NewEventsServiceClient, srv.URL)
	self := mesh.Caller{Subject: "toolmesh-worker-eventlog", Agent: "toolmesh-worker-eventlog", Roles: []string{mesh.RoleService}}
	workflowtest.StartWorker(t, c, eventlogworker.TaskQueue(), func(r worker.Registry) {
		eventlogworker.Register(r, &eventlogworker.Activities{Events: events, Self: self})
	})
	return &deliveryMesh{c: c, events: events, store: st}
}

func (m *deliveryMesh) record(t *testing.T, occs ...*outboxv1.Occurrence) {
	t.Helper()
	ctx := mesh.WithCall(t.Context(), mesh.Call{Caller: mesh.Caller{Subject: "relay", Agent: "relay", Roles: []string{mesh.RoleService}}})
	if _, err := m.events.Record(ctx, &eventsv1.RecordRequest{Occurrences: occs}); err != nil {
		t.Fatal(err)
	}
}

func (m *deliveryMesh) subscribe(t *testing.T, agent, name, url, secret string) *eventsv1.SubscribeResponse {
	t.Helper()
	ctx := mesh.WithCall(t.Context(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Grants: []string{"toolmesh:read"}}})
	res, err := m.events.Subscribe(ctx, &eventsv1.SubscribeRequest{Name: name, Url: url, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func newSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

var askSeq int

func askCreated(agent string) *outboxv1.Occurrence {
	askSeq++
	id := fmt.Sprintf("ask_%026d", askSeq)
	a := &ownerv1.Ask{AskId: id, AgentId: agent, Question: "?"}
	return outbox.New(outbox.ID("ask.created", id), "ask.created", &ownerv1.AskEventCreated{AskId: id, AgentId: agent, Ask: a}, time.Now())
}

// waitFor polls cond until it holds or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeliveries: a subscriber's events reach its receiver signed (the
// Standard Webhooks library verifies them), each once, others' events
// never; a receiver's 503 is retried; a 413 refuses one event and the next
// is delivered; a 410 ends the subscription and its workflow.
func TestDeliveries(t *testing.T) {
	m := startMesh(t)
	rc := &receiver{secret: newSecret()}
	hook := httptest.NewServer(rc)
	t.Cleanup(hook.Close)
	sub := m.subscribe(t, "alice", "ask.created", hook.URL, rc.secret)

	first := askCreated("alice")
	m.record(t, first, askCreated("bob"))
	waitFor(t, "the first delivery", func() bool { return len(rc.got()) == 1 })
	if got := rc.got(); got[0] != first.GetEventId() || rc.bad != 0 {
		t.Fatalf("delivered %v (%d unverified), want %s", got, rc.bad, first.GetEventId())
	}

	// 503, then 200: delivered on the retry. 413: refused, the next goes.
	answer := func(status ...int) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.status = status
	}
	answer(503)
	retried, refused, after := askCreated("alice"), askCreated("alice"), askCreated("alice")
	m.record(t, retried)
	waitFor(t, "the retried delivery", func() bool { return len(rc.got()) == 2 })
	answer(413)
	m.record(t, refused)
	waitFor(t, "the 413", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.status) == 0 })
	m.record(t, after)
	waitFor(t, "the delivery after the 413", func() bool { return len(rc.got()) == 3 })
	if want := []string{first.GetEventId(), retried.GetEventId(), after.GetEventId()}; !slices.Equal(rc.got(), want) {
		t.Fatalf("delivered %v, want %v", rc.got(), want)
	}

	// 410: the subscription and its workflow end.
	answer(410)
	m.record(t, askCreated("alice"))
	run := m.c.GetWorkflow(t.Context(), eventlog.DeliveryWorkflowID(sub.GetId()), "")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := run.Get(ctx, nil); err != nil {
		t.Fatalf("the delivery workflow after a 410: %v", err)
	}
	stored, err := m.store.Subscription(t.Context(), sub.GetId())
	if err != nil || stored.EndReason != eventlog.EndedGone {
		t.Fatalf("subscription after a 410: %+v, %v", stored, err)
	}
	desc, err := m.c.DescribeWorkflow(t.Context(), eventlog.DeliveryWorkflowID(sub.GetId()), "")
	if err != nil || desc.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("workflow = %v, %v", desc.RawResponse.GetWorkflowExecutionInfo().GetStatus(), err)
	}
}

// TestRecordHistories adds the history of each path of the delivery
// workflow to testdata/histories: the real activities and event log, on a
// dev server. It never overwrites a history:
//
//	go test ./workers/eventlog -run TestRecordHistories -record=TAG
func TestRecordHistories(t *testing.T) {
	if *record == "" {
		t.Skip("run with -record=TAG to add histories")
	}
	m := startMesh(t)
	capture := func(scenario string, drive func(rc *receiver, hook string) string) {
		t.Run(scenario, func(t *testing.T) {
			rc := &receiver{secret: newSecret()}
			hook := httptest.NewServer(rc)
			defer hook.Close()
			id := eventlog.DeliveryWorkflowID(drive(rc, hook.URL))
			desc, err := m.c.DescribeWorkflow(t.Context(), id, "")
			if err != nil {
				t.Fatal(err)
			}
			runID := desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			if err := workflowtest.WaitIdle(t.Context(), m.c, id, runID); err != nil {
				t.Fatal(err)
			}
			workflowtest.Record(t, m.c, *record, scenario, id, runID)
		})
	}
	capture("delivering", func(rc *receiver, hook string) string {
		sub := m.subscribe(t, "alice", "ask.created", hook, rc.secret)
		m.record(t, askCreated("alice"), askCreated("alice"))
		waitFor(t, "two deliveries", func() bool { return len(rc.got()) == 2 })
		return sub.GetId()
	})
	capture("retried-refused-gone", func(rc *receiver, hook string) string {
		sub := m.subscribe(t, "bob", "ask.created", hook, rc.secret)
		rc.status = []int{503}
		m.record(t, askCreated("bob"))
		waitFor(t, "the retry", func() bool { return len(rc.got()) == 1 })
		rc.mu.Lock()
		rc.status = []int{413, 410}
		rc.mu.Unlock()
		m.record(t, askCreated("bob"))
		waitFor(t, "the 413", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.status) == 1 })
		m.record(t, askCreated("bob"))
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := m.c.GetWorkflow(ctx, eventlog.DeliveryWorkflowID(sub.GetId()), "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		return sub.GetId()
	})
	capture("unsubscribed", func(rc *receiver, hook string) string {
		sub := m.subscribe(t, "carol", "ask.created", hook, rc.secret)
		ctx := mesh.WithCall(t.Context(), mesh.Call{Caller: mesh.Caller{Subject: "carol", Agent: "carol"}})
		if _, err := m.events.Unsubscribe(ctx, &eventsv1.UnsubscribeRequest{Name: "ask.created", Url: hook}); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := m.c.GetWorkflow(wctx, eventlog.DeliveryWorkflowID(sub.GetId()), "").Get(wctx, nil); err != nil {
			t.Fatal(err)
		}
		return sub.GetId()
	})
}
