package remoteagents_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/testsupport/workflowtest"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// pushService stands in for RemoteAgentsService's push RPCs: one task
// with one config whose webhook is hook, and the seqs recorded delivered.
type pushService struct {
	remoteagentsv1connect.RemoteAgentsServiceClient
	hook     string
	mu       sync.Mutex
	recorded []int64
}

func (s *pushService) GetPushDelivery(_ context.Context, req *remoteagentsv1.GetPushDeliveryRequest) (*remoteagentsv1.GetPushDeliveryResponse, error) {
	if req.GetConfigId() != "hook-1" {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such config"))
	}
	in := &inboundv1.Inbound{TaskId: req.GetTaskId(), ContextId: "ctx_1", AgentId: "bob", Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING, Version: req.GetSeq()}
	ev := &inboundv1.InboundEvent{TaskId: req.GetTaskId(), Seq: req.GetSeq(), Kind: inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS,
		Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING, Time: timestamppb.Now()}
	return &remoteagentsv1.GetPushDeliveryResponse{Inbound: in, Event: ev,
		Config: &inboundv1.PushConfig{TaskId: req.GetTaskId(), ConfigId: "hook-1", Url: s.hook, Token: "secret-token", AuthScheme: "Bearer"}}, nil
}

func (s *pushService) RecordPushDelivered(_ context.Context, req *remoteagentsv1.RecordPushDeliveredRequest) (*remoteagentsv1.RecordPushDeliveredResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recorded = append(s.recorded, req.GetSeq())
	return &remoteagentsv1.RecordPushDeliveredResponse{}, nil
}

// received is one push a webhook got.
type received struct {
	header http.Header
	body   []byte
}

// TestAPushIsSignedDedupableAndRetried: a push is the event as A2A
// streams it, with its id, the config's token, and a signature that
// verifies against the mesh's published keys (also as the bearer token the
// config asked for); a webhook that fails is tried again, one that refuses
// or that the egress guard refuses is not.
func TestAPushIsSignedDedupableAndRetried(t *testing.T) {
	seed := sha256.Sum256([]byte("worker push test mesh"))
	key := ed25519.NewKeyFromSeed(seed[:])
	keys := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(a2alink.Keys(key.Public().(ed25519.PublicKey)))
	}))
	t.Cleanup(keys.Close)
	signer, err := a2alink.NewPushSigner(key, keys.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []received
	status := http.StatusNoContent
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		got = append(got, received{r.Header.Clone(), body})
		w.WriteHeader(status)
	}))
	t.Cleanup(hook.Close)
	svc := &pushService{hook: hook.URL + "/a2a/hook"}
	acts := &remoteagents.Activities{HTTP: a2alink.HTTPClient(loopback, 10*time.Second, a2alink.MaxResponseBytes), Push: signer, RemoteAgents: svc}

	if err := acts.DeliverPush(t.Context(), remoteagents.PushRef{TaskID: "tsk_1", ConfigID: "hook-1", Seq: 2}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(svc.recorded) != 1 || svc.recorded[0] != 2 {
		t.Fatalf("%d pushes, recorded %v; want one, recorded at 2", len(got), svc.recorded)
	}
	p := got[0]
	var sr a2a.StreamResponse
	if err := json.Unmarshal(p.body, &sr); err != nil {
		t.Fatalf("body %s is not a StreamResponse: %v", p.body, err)
	}
	ev, ok := sr.Event.(*a2a.TaskStatusUpdateEvent)
	if !ok || ev.TaskID != "tsk_1" || ev.Status.State != a2a.TaskStateWorking {
		t.Errorf("pushed %s, want the working status of tsk_1", p.body)
	}
	if id, _ := ev.Metadata[a2alink.EventsExtension].(map[string]any)["id"].(string); id != "tsk_1/2" || p.header.Get(a2alink.PushEventIDHeader) != "tsk_1/2" {
		t.Errorf("event id %q / header %q, want tsk_1/2", id, p.header.Get(a2alink.PushEventIDHeader))
	}
	if p.header.Get("X-A2A-Notification-Token") != "secret-token" || p.header.Get("A2A-Notification-Token") != "secret-token" {
		t.Errorf("token headers %v, want the config's token in both spellings", p.header)
	}
	sig := p.header.Get(a2alink.PushSignatureHeader)
	c, err := a2alink.VerifyPush(t.Context(), a2alink.NewKeySets(loopback), sig, svc.hook, p.body, time.Now())
	if err != nil || c.ID != "tsk_1/2" || c.Seq != 2 {
		t.Fatalf("the push's signature: %+v, %v; want it verified for event tsk_1/2", c, err)
	}
	if p.header.Get("Authorization") != "Bearer "+sig {
		t.Errorf("Authorization %q, want the signature as the bearer token", p.header.Get("Authorization"))
	}
	// The body is what was signed: another body does not verify.
	if _, err := a2alink.VerifyPush(t.Context(), a2alink.NewKeySets(loopback), sig, svc.hook, []byte(`{}`), time.Now()); err == nil {
		t.Error("a changed body verified")
	}

	// A webhook that is down is tried again; one that refuses is not.
	// Neither is recorded.
	for _, tc := range []struct {
		status    int
		permanent bool
	}{{http.StatusServiceUnavailable, false}, {http.StatusTooManyRequests, false}, {http.StatusBadRequest, true}} {
		mu.Lock()
		status = tc.status
		mu.Unlock()
		err := acts.DeliverPush(t.Context(), remoteagents.PushRef{TaskID: "tsk_1", ConfigID: "hook-1", Seq: 3})
		if err == nil || nonRetryable(err) != tc.permanent {
			t.Errorf("webhook answering %d: %v, want an error (non-retryable: %v)", tc.status, err, tc.permanent)
		}
	}
	if len(svc.recorded) != 1 {
		t.Errorf("recorded %v after failed pushes, want only 2", svc.recorded)
	}
	// A deleted config needs nothing sent.
	if err := acts.DeliverPush(t.Context(), remoteagents.PushRef{TaskID: "tsk_1", ConfigID: "gone", Seq: 3}); err != nil {
		t.Errorf("push to a deleted config: %v, want nothing to do", err)
	}
	// The egress guard refuses a webhook on an address it does not allow.
	guarded := &remoteagents.Activities{HTTP: a2alink.HTTPClient(egress.Policy{}, 10*time.Second, a2alink.MaxResponseBytes), Push: signer, RemoteAgents: svc}
	before := len(got)
	if err := guarded.DeliverPush(t.Context(), remoteagents.PushRef{TaskID: "tsk_1", ConfigID: "hook-1", Seq: 3}); !nonRetryable(err) || len(got) != before {
		t.Errorf("push to a loopback webhook past the guard: %v (%d sent), want a refusal and nothing sent", err, len(got)-before)
	}
}

// TestTheInboundWorkflowPushesEveryEventInOrder: the workflow sends each
// config the events after the last it was sent, looks again when the task
// changes, and ends once the task has ended and everything was sent.
func TestTheInboundWorkflowPushesEveryEventInOrder(t *testing.T) {
	env := workflowtest.NewEnv()
	remoteagents.Register(env, &remoteagents.Activities{})
	var mu sync.Mutex
	var pushed []remoteagents.PushRef
	delivered := map[string]int64{}
	refreshes := 0
	env.OnActivity(remoteagents.ActivityRefreshInbound, mock.Anything, mock.Anything).Return(
		func(_ context.Context, wf *remoteagentsv1.InboundWorkflowInput) (*remoteagentsv1.RefreshInboundResponse, error) {
			taskID := wf.GetTaskId()
			mu.Lock()
			defer mu.Unlock()
			refreshes++
			// The task gains an event at each look until its answer
			// (events 4 and 5) ends it.
			in := &inboundv1.Inbound{TaskId: taskID, Status: inboundv1.InboundStatus_INBOUND_STATUS_WORKING, Version: int64(min(refreshes+1, 5))}
			if in.Version == 5 {
				in.Status = inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED
			}
			return &remoteagentsv1.RefreshInboundResponse{Inbound: in, Configs: []*inboundv1.PushConfig{
				{TaskId: taskID, ConfigId: "a", DeliveredSeq: delivered["a"]},
				{TaskId: taskID, ConfigId: "b", DeliveredSeq: max(delivered["b"], 2)}, // registered after event 2
			}}, nil
		})
	env.OnActivity(remoteagents.ActivityDeliverPush, mock.Anything, mock.Anything).Return(
		func(_ context.Context, ref remoteagents.PushRef) error {
			mu.Lock()
			defer mu.Unlock()
			pushed = append(pushed, ref)
			delivered[ref.ConfigID] = ref.Seq
			if ref.ConfigID == "b" && ref.Seq == 4 && delivered["b-failed"] == 0 {
				// The webhook is down once: the activity's retry sends it.
				delivered["b-failed"] = 1
				delivered[ref.ConfigID] = 3
				return temporal.NewApplicationError("webhook down", "Down")
			}
			return nil
		})
	env.ExecuteWorkflow(remoteagents.InboundWorkflow, &remoteagentsv1.InboundWorkflowInput{TaskId: "tsk_1", AgentId: "bob", Sender: "a2a-partner"})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("workflow completed %v, error %v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	seqs := map[string][]int64{}
	for _, p := range pushed {
		seqs[p.ConfigID] = append(seqs[p.ConfigID], p.Seq)
	}
	if got := seqs["a"]; len(got) != 5 || got[0] != 1 || got[4] != 5 {
		t.Errorf("config a was sent %v, want 1 to 5 in order", got)
	}
	// b: 3, then 4 twice (the failed attempt and its retry), then 5.
	if got := seqs["b"]; len(got) != 4 || got[0] != 3 || got[1] != 4 || got[2] != 4 || got[3] != 5 {
		t.Errorf("config b was sent %v, want 3, 4 (again after a failure), 5", got)
	}
}
