package remoteagents_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/temporalclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/a2atest"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
	remoteagents "github.com/toolmesh/toolmesh/workers/remoteagents"
)

// eventLog is RemoteAgentsService as the stream activity sees it: it
// keeps the events recorded, and tells the test of each.
type eventLog struct {
	remoteagentsv1connect.RemoteAgentsServiceClient
	// failAfter fails every recording after that many (0: none fails).
	failAfter int
	// then is called after each recording, when set.
	then func()

	mu   sync.Mutex
	reqs []*remoteagentsv1.RecordInvocationEventRequest
}

func (l *eventLog) RecordInvocationEvent(_ context.Context, req *remoteagentsv1.RecordInvocationEventRequest) (*remoteagentsv1.RecordInvocationEventResponse, error) {
	l.mu.Lock()
	if l.failAfter > 0 && len(l.reqs) >= l.failAfter {
		l.mu.Unlock()
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the service is down"))
	}
	l.reqs = append(l.reqs, req)
	l.mu.Unlock()
	if l.then != nil {
		l.then()
	}
	return &remoteagentsv1.RecordInvocationEventResponse{}, nil
}

// texts are what the recorded events said ("" for a bare state), and
// their keys.
func (l *eventLog) texts() (texts, keys []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.reqs {
		texts, keys = append(texts, r.GetRemoteState()+": "+r.GetText()), append(keys, r.GetEventKey())
	}
	return texts, keys
}

// streamEnv runs StreamMessage under Temporal's activity test
// environment (heartbeats, their details), with acts.
func streamEnv(acts *remoteagents.Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(sdklog.NewStructuredLogger(logging.Discard()))
	env := s.NewTestActivityEnvironment()
	env.SetDataConverter(temporalclient.DataConverter())
	env.RegisterActivityWithOptions(acts.StreamMessage, activity.RegisterOptions{Name: remoteagents.ActivityStreamMessage})
	return env
}

func streamActs(t *testing.T, log *eventLog) *remoteagents.Activities {
	acts := activities(t)
	acts.RemoteAgents, acts.Log = log, logging.Discard()
	return acts
}

var steps = []string{"Searching flights.", "Found 3 flights.", "Holding seat 12A."}

// TestStreamRecordsEachStepThenTheAnswer: the activity sends the message
// over the stream and records, in order, what the agent reports, then
// returns the completed task with its artifact as the answer.
func TestStreamRecordsEachStepThenTheAnswer(t *testing.T) {
	agent := a2atest.NewProgressAgent(steps...)
	agent.Step(len(steps) + 1)
	log := &eventLog{}
	env := streamEnv(streamActs(t, log))
	in := invokeInput(a2atest.Serve(t, agent, true), "book me a flight")
	val, err := env.ExecuteActivity(remoteagents.ActivityStreamMessage, in)
	if err != nil {
		t.Fatal(err)
	}
	var got remoteagents.Remote
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.State != "completed" || got.Answer != a2atest.Answer || got.TaskID == "" || !got.Streaming {
		t.Errorf("StreamMessage = %+v, want the completed task with the itinerary as the answer", got)
	}
	texts, _ := log.texts()
	want := []string{"submitted: ", "working: Searching flights.", "working: Found 3 flights.", "working: Holding seat 12A.",
		": " + a2atest.ArtifactName + ": " + a2atest.Answer, "completed: " + a2atest.Done}
	if !slices.Equal(texts, want) {
		t.Errorf("recorded %q, want %q", texts, want)
	}
	if ids := agent.Executed(); len(ids) != 1 || ids[0] != in.GetMessageId() {
		t.Errorf("the agent executed %v, want the message %s once", ids, in.GetMessageId())
	}
}

// TestStreamResumesFromItsHeartbeat: a retried activity (its worker died)
// whose heartbeat names the task does not send the message again: it
// subscribes to the task, records nothing it had recorded (the snapshot
// shows the status it had), and follows it to its end.
func TestStreamResumesFromItsHeartbeat(t *testing.T) {
	agent := a2atest.NewProgressAgent(steps...)
	base := a2atest.Serve(t, agent, true)
	in := invokeInput(base, "book me a flight")

	// The first attempt reads two steps; recording the third fails (as
	// if its worker died there). What it heartbeat last is what its retry
	// gets.
	first := &eventLog{failAfter: 3}
	var last remoteagents.Mark
	env := streamEnv(streamActs(t, first))
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var m remoteagents.Mark
		if details.Get(&m) == nil {
			last = m
		}
	})
	agent.Step(3)
	if _, err := env.ExecuteActivity(remoteagents.ActivityStreamMessage, in); err == nil {
		t.Fatal("the first attempt did not fail")
	}
	if last.Remote.TaskID == "" || last.Remote.Answer != steps[1] {
		t.Fatalf("the first attempt's last heartbeat %+v, want the task at its second step", last)
	}

	// The retry subscribes: the snapshot shows the third step, which it
	// records; then the agent goes on.
	var once sync.Once
	second := &eventLog{then: func() { once.Do(func() { agent.Step(1) }) }}
	env = streamEnv(streamActs(t, second))
	env.SetHeartbeatDetails(last)
	val, err := env.ExecuteActivity(remoteagents.ActivityStreamMessage, in)
	if err != nil {
		t.Fatal(err)
	}
	var got remoteagents.Remote
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.State != "completed" || got.Answer != a2atest.Answer {
		t.Errorf("the resumed StreamMessage = %+v, want the completed task", got)
	}
	if ids := agent.Executed(); len(ids) != 1 {
		t.Errorf("the agent executed %v, want the message once", ids)
	}
	_, firstKeys := first.texts()
	texts, keys := second.texts()
	want := []string{"working: Holding seat 12A.", ": " + a2atest.ArtifactName + ": " + a2atest.Answer, "completed: " + a2atest.Done}
	if !slices.Equal(texts, want) {
		t.Errorf("the resumed attempt recorded %q, want %q", texts, want)
	}
	for _, k := range keys {
		if slices.Contains(firstKeys, k) {
			t.Errorf("event %s recorded by both attempts", k)
		}
	}
}

// TestStreamOfAnEndedTaskReadsIt: a retry whose task ended meanwhile (the
// agent no longer streams it) reads the task and returns its end.
func TestStreamOfAnEndedTaskReadsIt(t *testing.T) {
	agent := a2atest.NewProgressAgent(steps...)
	agent.Step(len(steps) + 1)
	base := a2atest.Serve(t, agent, true)
	in := invokeInput(base, "book me a flight")
	log := &eventLog{}
	val, err := streamEnv(streamActs(t, log)).ExecuteActivity(remoteagents.ActivityStreamMessage, in)
	if err != nil {
		t.Fatal(err)
	}
	var done remoteagents.Remote
	if err := val.Get(&done); err != nil {
		t.Fatal(err)
	}
	env := streamEnv(streamActs(t, &eventLog{}))
	env.SetHeartbeatDetails(remoteagents.Mark{Remote: remoteagents.Remote{Endpoint: done.Endpoint, Binding: done.Binding, Version: done.Version,
		Streaming: true, TaskID: done.TaskID, State: "working"}, Status: "status:working"})
	val, err = env.ExecuteActivity(remoteagents.ActivityStreamMessage, in)
	if err != nil {
		t.Fatal(err)
	}
	var got remoteagents.Remote
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.State != "completed" || got.Answer != a2atest.Answer || len(agent.Executed()) != 1 {
		t.Errorf("StreamMessage of the ended task = %+v (agent executed %v), want it completed, sent once", got, agent.Executed())
	}
}

// TestAnAgentThatDoesNotStreamIsSentTo: without streaming in its card the
// activity sends as SendMessage does and records nothing; the workflow
// polls.
func TestAnAgentThatDoesNotStreamIsSentTo(t *testing.T) {
	agent := a2atest.NewProgressAgent(steps...)
	log := &eventLog{}
	val, err := streamEnv(streamActs(t, log)).ExecuteActivity(remoteagents.ActivityStreamMessage,
		invokeInput(a2atest.Serve(t, agent, false), "book me a flight"))
	if err != nil {
		t.Fatal(err)
	}
	var got remoteagents.Remote
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.Streaming || got.TaskID == "" || (got.State != "submitted" && got.State != "working") {
		t.Errorf("StreamMessage of an agent that does not stream = %+v, want the task as sent", got)
	}
	if texts, _ := log.texts(); len(texts) != 0 {
		t.Errorf("recorded %q for an agent that does not stream, want nothing", texts)
	}
}

// TestACutStreamIsResubscribed: the agent's server drops the stream after
// two events; the activity resubscribes to the task and reads the rest,
// each once, and the agent was sent the message once.
func TestACutStreamIsResubscribed(t *testing.T) {
	agent := a2atest.NewProgressAgent(steps...)
	agent.CutFirstStream(2)
	base := a2atest.Serve(t, agent, true)
	// The agent goes on only once the activity has resubscribed: what it
	// reports meanwhile would reach no one (this agent replays nothing).
	log := &eventLog{}
	agent.Step(1)
	go func() {
		for agent.Subscriptions() == 0 {
			time.Sleep(10 * time.Millisecond)
		}
		agent.Step(len(steps))
	}()
	val, err := streamEnv(streamActs(t, log)).ExecuteActivity(remoteagents.ActivityStreamMessage, invokeInput(base, "book me a flight"))
	if err != nil {
		t.Fatal(err)
	}
	var got remoteagents.Remote
	if err := val.Get(&got); err != nil {
		t.Fatal(err)
	}
	if got.State != "completed" || got.Answer != a2atest.Answer || agent.Subscriptions() != 1 || len(agent.Executed()) != 1 {
		t.Errorf("StreamMessage = %+v after %d subscriptions, %d sends; want completed after one resubscription, one send",
			got, agent.Subscriptions(), len(agent.Executed()))
	}
	texts, _ := log.texts()
	want := []string{"submitted: ", "working: Searching flights.", "working: Found 3 flights.", "working: Holding seat 12A.",
		": " + a2atest.ArtifactName + ": " + a2atest.Answer, "completed: " + a2atest.Done}
	if !slices.Equal(texts, want) {
		t.Errorf("recorded %q, want %q", texts, want)
	}
}
