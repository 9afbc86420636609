package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/workflowrun"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Progress of an invocation. The invoke workflow records what the remote
// agent reports while it works (RecordInvocationEvent: its status messages
// and artifacts, read from its A2A stream) as the invocation's events in
// the store; InvokeStream, while it waits for the outcome, reads them from
// there and sends each on as a CallEvent, which the MCP edge passes to the
// caller as a progress notification and a log message. Reading the store,
// not a channel, lets any replica of the service follow any invocation.

// Intervals of InvokeStream.
const (
	// progressPoll is how often the events are read while the call waits.
	progressPoll = 200 * time.Millisecond
	// stillWorking is how long a waiting call goes without an event before
	// it reports that the remote agent is still working, so that a client
	// sees the call is alive.
	stillWorking = 5 * time.Second
)

// InvokeStream implements RemoteAgentsService.InvokeStream: Invoke whose
// wait reports the invocation's events as they are recorded, then the
// invocation.
func (s *Service) InvokeStream(ctx context.Context, sreq *remoteagentsv1.InvokeStreamRequest, st *connect.ServerStream[remoteagentsv1.InvokeStreamResponse]) error {
	// The same fields as Invoke's request (a test holds them equal).
	req := &remoteagentsv1.InvokeRequest{}
	if err := convert(sreq, req); err != nil {
		return err
	}
	inv, err := s.begin(ctx, req)
	if err != nil {
		return err
	}
	if inv.GetStatus() != working {
		return st.Send(&remoteagentsv1.InvokeStreamResponse{Invocation: inv})
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan *remoteagentsv1.Invocation, 1)
	go func() { done <- s.await(wctx, inv, workflowrun.WaitBudget(req.WaitSeconds, s.cfg.DefaultWait)) }()
	p := &progressSender{s: s, st: st, id: inv.GetInvocationId(), quiet: s.now()}
	tick := time.NewTicker(progressPoll)
	defer tick.Stop()
	for {
		select {
		case out := <-done:
			// Every event was recorded before the workflow ended: send
			// what is left, then the outcome.
			if err := p.flush(ctx); err != nil {
				return err
			}
			if out.GetStatus() == working {
				// The wait ran out: the invocation with its latest progress.
				if cur, err := s.store.GetInvocation(ctx, out.GetInvocationId()); err == nil && cur.GetStatus() == working {
					out = cur
				}
			}
			return st.Send(&remoteagentsv1.InvokeStreamResponse{Invocation: out})
		case <-tick.C:
			if err := p.flush(ctx); err != nil {
				return err
			}
		}
	}
}

// progressSender sends an invocation's events, in order, each once.
type progressSender struct {
	s  *Service
	st *connect.ServerStream[remoteagentsv1.InvokeStreamResponse]
	id string
	// after is the seq of the last event sent; n counts the progress
	// reports sent (each one's progress); quiet is when the last was.
	after int64
	n     float64
	quiet time.Time
}

// flush sends the events recorded since the last flush, or a report that
// the agent is still working when there has been none for a while. A
// failure to read the events is logged and tried again at the next flush;
// a failure to send ends the call (its client is gone).
func (p *progressSender) flush(ctx context.Context) error {
	evs, err := p.s.store.InvocationEvents(ctx, p.id, p.after, 100)
	if err != nil {
		p.s.log.WarnContext(ctx, "remoteagents.progress_read_failed", "invocation_id", p.id, "error", err)
		return nil
	}
	for _, ev := range evs {
		if err := p.send(progressText(ev), ev.GetText()); err != nil {
			return err
		}
		p.after = ev.GetSeq()
	}
	if len(evs) == 0 && p.s.now().Sub(p.quiet) >= stillWorking {
		return p.send("The remote agent is still working on it.", "")
	}
	return nil
}

// send reports one step: progress with msg and, when the remote agent said
// something, a log message with it.
func (p *progressSender) send(msg, said string) error {
	p.n++
	p.quiet = p.s.now()
	err := p.st.Send(&remoteagentsv1.InvokeStreamResponse{Event: &toolv1.CallEvent{Event: &toolv1.CallEvent_Progress{
		Progress: &toolv1.Progress{Progress: p.n, Message: msg}}}})
	if err != nil || said == "" {
		return err
	}
	return p.st.Send(&remoteagentsv1.InvokeStreamResponse{Event: &toolv1.CallEvent{Event: &toolv1.CallEvent_Log{
		Log: &toolv1.LogMessage{Level: toolv1.LogLevel_LOG_LEVEL_INFO, Logger: ToolInvoke, Data: structpb.NewStringValue(said)}}}})
}

// progressText is what a progress report says of ev.
func progressText(ev *remoteagentsv1.InvocationEvent) string {
	if t := ev.GetText(); t != "" {
		return clip(t, 2000)
	}
	return fmt.Sprintf("The remote task is %s.", ev.GetRemoteState())
}

// RecordInvocationEvent implements RemoteAgentsService.RecordInvocationEvent,
// for the invoke workflow (mesh service role).
func (s *Service) RecordInvocationEvent(ctx context.Context, req *remoteagentsv1.RecordInvocationEventRequest) (*remoteagentsv1.RecordInvocationEventResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	ev, recorded, err := s.store.AppendInvocationEvent(ctx, InvocationEventIn{
		InvocationID: req.GetInvocationId(), Key: req.GetEventKey(), RemoteState: req.GetRemoteState(), Text: req.GetText(),
		TaskID: req.GetTaskId(), ContextID: req.GetContextId(), At: s.nowMillis(),
	})
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("invocation %s not found", req.GetInvocationId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record invocation event: %w", err))
	}
	return &remoteagentsv1.RecordInvocationEventResponse{Event: ev, Recorded: recorded}, nil
}
