package remoteagents

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/mesh"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// Streaming. When the remote agent's card says it streams (and the mesh
// speaks A2A 1.0 to it), the StreamMessage activity sends the message with
// SendStreamingMessage and reads the task's events until the task ends or
// needs input, instead of the workflow polling. Each event that says
// something (a status, its message, an artifact) is recorded with
// RemoteAgentsService.RecordInvocationEvent under a key of its own, so an
// event read twice is recorded once; the caller of remoteagents_invoke
// sees them as progress.
//
// The activity heartbeats where it is (the remote task and the id of the
// last event with one: a Mark). A stream that is cut is resubscribed
// (SubscribeToTask, with Last-Event-ID when the remote numbers its events)
// by the activity itself; a retry of the activity (after its worker died)
// resumes from the last heartbeat the same way and never sends the
// message again once the remote task is known.

// ActivityStreamMessage is the activity type of StreamMessage.
const ActivityStreamMessage = "StreamMessage"

// Mark is where a StreamMessage activity is, as it heartbeats it.
type Mark struct {
	// Remote is the remote task as last read (TaskID empty until the
	// first event named it).
	Remote Remote `json:"remote"`
	// LastEventID is the id of the last event read that had one (the
	// remote's own ids, as a toolmesh agent gives them).
	LastEventID string `json:"last_event_id,omitempty"`
	// Status is the key of the last status read.
	Status string `json:"status,omitempty"`
}

// streamHeartbeat is how often a streaming activity heartbeats while its
// stream is quiet; the SDK sends at most one per 80% of the heartbeat
// timeout (streamOpts), which is how soon a cancel or a dead worker is
// noticed.
const streamHeartbeat = time.Second

// quietSend is how long a streaming activity sends no heartbeat while it
// sends the message (within the heartbeat timeout, streamOptions).
const quietSend = 2 * time.Second

// resubscribes is how many cuts in a row a streaming activity resubscribes
// after before it fails (and its retry resumes from the heartbeat).
const resubscribes = 5

// StreamMessage sends the invocation's message (as SendMessage does) and,
// when the agent streams, follows the task's events until it ends, needs
// input or the activity is cancelled; the Remote it returns is where the
// task is then. For an agent that does not stream it returns as
// SendMessage does (the workflow polls). A cancelled activity returns a
// canceled error whose details are the Remote, so the workflow can cancel
// the remote task.
func (a *Activities) StreamMessage(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) (Remote, error) {
	var mark Mark
	if activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &mark); err != nil {
			mark = Mark{}
		}
	}
	f := &follower{a: a, in: in, mark: mark, heartbeat: func(m Mark) { activity.RecordHeartbeat(ctx, m) }}
	stop := f.beat(ctx)
	defer stop()
	r, err := f.run(ctx)
	if err != nil && ctx.Err() != nil {
		return Remote{}, temporal.NewCanceledError(f.current().Remote)
	}
	return r, err
}

// follower is one StreamMessage attempt.
type follower struct {
	a  *Activities
	in *remoteagentsv1.InvokeWorkflowInput

	// heartbeat records the mark with Temporal.
	heartbeat func(Mark)

	mu   sync.Mutex
	mark Mark
}

// advance moves the mark and heartbeats it once it names the task.
func (f *follower) advance(m Mark) {
	f.mu.Lock()
	f.mark = m
	f.mu.Unlock()
	if m.Remote.TaskID != "" {
		f.heartbeat(m)
	}
}

func (f *follower) current() Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mark
}

// beat heartbeats the mark every streamHeartbeat until stop is called.
func (f *follower) beat(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(streamHeartbeat)
		defer t.Stop()
		start := time.Now()
		for {
			// The SDK sends one heartbeat per throttle interval and holds
			// back the rest: one without the task, sent while the message
			// goes out, would hold back the first that names it, and a
			// retry would send the message again. So none goes before the
			// task is known unless the send takes long.
			if m := f.current(); m.Remote.TaskID != "" || time.Since(start) >= quietSend {
				f.heartbeat(m)
			}
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// run sends the message, or resumes the mark's task, and follows it.
func (f *follower) run(ctx context.Context) (Remote, error) {
	mark := f.current()
	var events iter.Seq2[a2a.Event, error]
	var client *a2aclient.Client
	if mark.Remote.TaskID == "" {
		s, err := f.a.prepare(ctx, f.in, true)
		if err != nil {
			return Remote{}, err
		}
		defer s.client.Destroy()
		if !s.remote.Streaming {
			return f.a.send(ctx, s)
		}
		client = s.client
		mark.Remote = s.remote
		f.mu.Lock()
		f.mark = mark
		f.mu.Unlock()
		events = client.SendStreamingMessage(ctx, &a2a.SendMessageRequest{Message: s.msg})
	} else {
		c, err := f.a.streamClient(ctx, mark.Remote.ref())
		if err != nil {
			return Remote{}, err
		}
		defer c.Destroy()
		client = c
		events = f.subscribe(ctx, client)
	}
	for cut := 0; ; {
		done, err := f.follow(ctx, events)
		if done {
			return f.finish(ctx, client), nil
		}
		if ctx.Err() != nil {
			return Remote{}, ctx.Err()
		}
		if _, ok := errors.AsType[*recordError](err); ok {
			// The service is not there: the retry resumes from the mark.
			return Remote{}, err
		}
		if f.current().Remote.TaskID != "" {
			// The task may have ended while nobody read it (an agent
			// may refuse to subscribe to an ended task): read it.
			if r, ended, gerr := f.settle(ctx, client); gerr != nil || ended {
				return r, gerr
			}
		} else if err != nil && a2alink.Permanent(err) {
			return Remote{}, refused(err)
		}
		if cut++; cut > resubscribes {
			return Remote{}, fmt.Errorf("the remote agent's stream was cut %d times: %s", cut, describe(err))
		}
		f.a.Log.WarnContext(ctx, "remoteagents.stream_cut", "invocation_id", f.in.GetInvocationId(), "task_id", f.current().Remote.TaskID,
			"attempt", cut, "error", describe(err))
		select {
		case <-ctx.Done():
			return Remote{}, ctx.Err()
		case <-time.After(time.Duration(cut) * time.Second):
		}
		if f.current().Remote.TaskID == "" {
			// Cut before the task was named: the send's outcome is
			// unknown; the activity's retry sends the same message again.
			return Remote{}, fmt.Errorf("the remote agent's stream was cut before it named the task: %s", describe(err))
		}
		events = f.subscribe(ctx, client)
	}
}

func describe(err error) string {
	if err == nil {
		return "the stream ended"
	}
	return a2alink.Describe(err)
}

// subscribe resubscribes to the mark's task, after its last event id when
// it has one.
func (f *follower) subscribe(ctx context.Context, client *a2aclient.Client) iter.Seq2[a2a.Event, error] {
	mark := f.current()
	if mark.LastEventID != "" {
		ctx = a2aclient.AttachServiceParams(ctx, a2aclient.ServiceParams{a2alink.ParamLastEventID: {mark.LastEventID}})
	}
	return client.SubscribeToTask(ctx, &a2a.SubscribeToTaskRequest{ID: a2a.TaskID(mark.Remote.TaskID)})
}

// follow reads events, recording each and moving the mark, until the task
// ends or needs input (done) or the stream ends or fails.
func (f *follower) follow(ctx context.Context, events iter.Seq2[a2a.Event, error]) (done bool, err error) {
	for ev, err := range events {
		if err != nil {
			return false, err
		}
		step, ok := stepOf(ev)
		if !ok {
			continue
		}
		mark := f.current()
		if err := f.record(ctx, mark, step); err != nil {
			return false, &recordError{err}
		}
		f.advance(mark.after(step))
		if step.ends() {
			return true, nil
		}
	}
	return false, nil
}

// record records step as the invocation's event, unless it is a snapshot
// that shows the status read last.
func (f *follower) record(ctx context.Context, mark Mark, s step) error {
	if s.key == "" || (s.snapshot && s.key == mark.Status) {
		return nil
	}
	if f.a.RemoteAgents == nil {
		return nil
	}
	_, err := f.a.RemoteAgents.RecordInvocationEvent(mesh.WithCall(ctx, mesh.Call{Caller: f.a.Self}), &remoteagentsv1.RecordInvocationEventRequest{
		InvocationId: f.in.GetInvocationId(), EventKey: s.key, RemoteState: s.state, Text: clip(s.text, 10000),
		TaskId: s.taskID, ContextId: s.contextID,
	})
	if err != nil {
		return fmt.Errorf("record the remote agent's event: %w", err)
	}
	return nil
}

// recordError is a failure to record an event with the service.
type recordError struct{ err error }

func (e *recordError) Error() string { return e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

// settle reads the mark's task; when it has ended (or needs input) its
// status is recorded and ended is set. A refusal no retry changes (the
// agent does not know the task) is an error.
func (f *follower) settle(ctx context.Context, client *a2aclient.Client) (r Remote, ended bool, err error) {
	r = f.current().Remote
	task, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(r.TaskID)})
	if err != nil {
		if a2alink.Permanent(err) {
			return Remote{}, false, refused(err)
		}
		return r, false, nil
	}
	s, _ := stepOf(task)
	if !s.ends() {
		return r, false, nil
	}
	mark := f.current()
	if err := f.record(ctx, mark, s); err != nil {
		return r, false, err
	}
	f.advance(mark.after(s))
	r.follow(task)
	return r, true, nil
}

// finish reads the ended task whole (its artifacts are the answer); the
// mark's Remote when it cannot.
func (f *follower) finish(ctx context.Context, client *a2aclient.Client) Remote {
	r := f.current().Remote
	if r.TaskID == "" {
		return r
	}
	task, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(r.TaskID)})
	if err != nil {
		f.a.Log.WarnContext(ctx, "remoteagents.stream_final_read_failed", "invocation_id", f.in.GetInvocationId(), "error", describe(err))
		return r
	}
	r.follow(task)
	return r
}

// step is what one event of a remote task says.
type step struct {
	// key names the event among the task's (empty: nothing to record).
	key string
	// snapshot is set for a task as a whole (a stream's first event).
	snapshot bool
	// id is the remote's own id of the event, when it gives one.
	id                      string
	state, text             string
	taskID, contextID       string
	answer                  string
	message, artifact, term bool
}

// stepOf reads one event; ok is false for an event that is none of a
// task, a status update, an artifact update or a message.
func stepOf(ev a2a.Event) (s step, ok bool) {
	switch e := ev.(type) {
	case *a2a.Message:
		text := a2alink.Text(e.Parts)
		return step{key: "message:" + e.ID, state: a2alink.StateName(a2a.TaskStateCompleted), text: text, answer: text,
			contextID: e.ContextID, message: true, term: true}, true
	case *a2a.Task:
		s = statusStep(e.Status)
		s.snapshot, s.taskID, s.contextID = true, string(e.ID), e.ContextID
		s.id = eventID(e.Metadata, "last_event_id")
		return s, true
	case *a2a.TaskStatusUpdateEvent:
		s = statusStep(e.Status)
		s.taskID, s.contextID, s.id = string(e.TaskID), e.ContextID, eventID(e.Metadata, "id")
		return s, true
	case *a2a.TaskArtifactUpdateEvent:
		if e.Artifact == nil {
			return step{}, false
		}
		text := a2alink.Text(e.Artifact.Parts)
		sum := sha256.Sum256([]byte(text))
		s = step{key: "artifact:" + string(e.Artifact.ID) + ":" + hex.EncodeToString(sum[:8]), text: text, artifact: true,
			taskID: string(e.TaskID), contextID: e.ContextID, id: eventID(e.Metadata, "id")}
		if s.id != "" {
			s.key = "artifact:" + s.id
		}
		if e.Artifact.Name != "" && text != "" {
			s.text = e.Artifact.Name + ": " + text
		}
		return s, true
	}
	return step{}, false
}

// statusStep is the step of a task status: keyed by its state and its
// message, so that the status a snapshot shows is the update that set it.
func statusStep(st a2a.TaskStatus) step {
	s := step{state: a2alink.StateName(st.State), key: "status:" + a2alink.StateName(st.State)}
	if st.Message != nil {
		s.text = a2alink.Text(st.Message.Parts)
		s.key += ":" + st.Message.ID
	}
	s.term = st.State.Terminal() || st.State == a2a.TaskStateInputRequired || st.State == a2a.TaskStateAuthRequired
	return s
}

// eventID is the remote's id of an event, under the mesh's events
// extension (the key a toolmesh agent gives it).
func eventID(meta map[string]any, key string) string {
	m, _ := meta[a2alink.EventsExtension].(map[string]any)
	id, _ := m[key].(string)
	return id
}

// ends reports whether the task is done with once s is read: it ended,
// needs input, or the agent answered with a message.
func (s step) ends() bool { return s.term }

// after is the mark once s is read.
func (m Mark) after(s step) Mark {
	r := &m.Remote
	if s.taskID != "" {
		r.TaskID = s.taskID
	}
	if s.contextID != "" {
		r.ContextID = s.contextID
	}
	switch {
	case s.message:
		r.State, r.Answer = s.state, clip(s.answer, 100000)
	case s.artifact:
	default:
		r.State = s.state
		if s.text != "" {
			r.Answer = clip(s.text, 100000)
		}
		m.Status = s.key
	}
	if s.id != "" {
		m.LastEventID = s.id
	}
	return m
}

// sending is a message ready to go: the client of the interface picked
// from the card, and what the Remote will say of it.
type sending struct {
	client *a2aclient.Client
	msg    *a2a.Message
	remote Remote
}

// prepare reads the agent's card, picks the interface, opens a client
// (one without a deadline on the whole response when stream is set and
// the agent streams) and builds the message with its signed depth.
func (a *Activities) prepare(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput, stream bool) (*sending, error) {
	card, err := a2alink.FetchCard(ctx, a.HTTP, in.GetUrl())
	if err != nil {
		return nil, classify(err)
	}
	iface, err := a2alink.Negotiate(card.AgentCard)
	if err != nil {
		return nil, refused(err)
	}
	r := Remote{Endpoint: iface.URL, Binding: string(iface.ProtocolBinding), Version: string(iface.ProtocolVersion),
		Streaming: card.Capabilities.Streaming && string(iface.ProtocolVersion) == a2alink.Version10}
	hc := a.HTTP
	if stream && r.Streaming {
		hc = streaming(a.HTTP)
	}
	client, err := a2alink.NewClient(ctx, hc, iface)
	if err != nil {
		return nil, refused(err)
	}
	msg := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(in.GetMessage()))
	msg.ID, msg.TaskID, msg.ContextID = in.GetMessageId(), a2a.TaskID(in.GetTaskId()), in.GetContextId()
	if a.Depth != nil {
		tok, err := a.Depth.Sign(iface.URL, in.GetAgentId(), in.GetMessageId(), int(in.GetDepth())+1, time.Now())
		if err != nil {
			client.Destroy()
			return nil, refused(err)
		}
		msg.SetMeta(a2alink.MetadataDepthToken, tok)
		msg.Extensions = []string{a2alink.DepthExtension}
	}
	return &sending{client: client, msg: msg, remote: r}, nil
}

// send sends s's message without waiting for the task to end.
func (a *Activities) send(ctx context.Context, s *sending) (Remote, error) {
	res, err := s.client.SendMessage(ctx, &a2a.SendMessageRequest{Message: s.msg, Config: &a2a.SendMessageConfig{ReturnImmediately: true}})
	if err != nil {
		return Remote{}, classify(err)
	}
	r := s.remote
	switch v := res.(type) {
	case *a2a.Message:
		r.ContextID, r.State, r.Answer = v.ContextID, a2alink.StateName(a2a.TaskStateCompleted), a2alink.Text(v.Parts)
		return r, nil
	case *a2a.Task:
		r.follow(v)
		return r, nil
	}
	return Remote{}, refused(a2a.ErrInvalidAgentResponse)
}

// streamClient opens a client for reading a task's stream.
func (a *Activities) streamClient(ctx context.Context, ref TaskRef) (*a2aclient.Client, error) {
	saved := a.HTTP
	c := *a
	c.HTTP = streaming(saved)
	return c.client(ctx, ref)
}

// streaming is hc without a bound on a whole exchange (a stream lasts as
// long as its task); the time to the response's headers stays bounded.
func streaming(hc *http.Client) *http.Client {
	c := *hc
	c.Timeout = 0
	return &c
}

// canceledRemote is the Remote a cancelled StreamMessage reported.
// timedOutRemote is where the remote task was when a StreamMessage activity
// ran out of time: the last Mark it heartbeat; false when it named no task.
func timedOutRemote(err error) (Remote, bool) {
	var te *temporal.TimeoutError
	var m Mark
	if errors.As(err, &te) && te.HasLastHeartbeatDetails() && te.LastHeartbeatDetails(&m) == nil && m.Remote.TaskID != "" {
		return m.Remote, true
	}
	return Remote{}, false
}

func canceledRemote(err error) (Remote, bool) {
	var ce *temporal.CanceledError
	var r Remote
	if errors.As(err, &ce) && ce.HasDetails() && ce.Details(&r) == nil && r.TaskID != "" {
		return r, true
	}
	return Remote{}, false
}
