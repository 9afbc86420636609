package remoteagents

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1/remoteagentsv1connect"
)

// Activities are the invoke workflow's calls: to the remote agent over
// A2A, and to RemoteAgentsService through the generated client.
type Activities struct {
	// HTTP reaches remote agents: an egress-guarded client
	// (a2alink.HTTPClient).
	HTTP *http.Client
	// Depth signs the invocation depth of each message; without it
	// messages go unsigned (and a receiving toolmesh counts them as a new
	// chain).
	Depth *a2alink.DepthSigner
	// Push signs the pushes of inbound tasks; without it they go
	// unsigned.
	Push *a2alink.PushSigner
	// RemoteAgents reaches RemoteAgentsService; its client must send the
	// identity in the call's context as a mesh token.
	RemoteAgents remoteagentsv1connect.RemoteAgentsServiceClient
	// Self is the worker's own identity (mesh.RoleService).
	Self mesh.Caller
	// Audit records extensions in the audit trail; without it they are
	// logged as unaudited.
	Audit *audittrail.Recorder
	// Log receives the activities' events.
	Log *slog.Logger
}

// ToolExtendInvocation is the tool an extension's audit record names.
const ToolExtendInvocation = "remoteagents_extend_invocation"

// RecordExtension records an accepted extension in the audit trail, once
// per call id.
func (a *Activities) RecordExtension(ctx context.Context, up *remoteagentsv1.ExtendInvocationUpdate) error {
	if a.Audit == nil {
		a.Log.WarnContext(ctx, "remoteagents.invocation_extension_unaudited", "call_id", up.GetCallId(), "subject", up.GetRequestedBy(),
			"invocation_id", up.GetRequest().GetInvocationId(), "message", "no audit service configured")
		return nil
	}
	_, err := a.Audit.Record(ctx, audittrail.Entry{CallID: up.GetCallId(), Actor: up.GetRequestedBy(), Tool: ToolExtendInvocation,
		Reason: up.GetReason(), Arguments: up.GetRequest()})
	return err
}

// SendMessage sends the invocation's message to the remote agent: it reads
// the agent's card, picks the interface to use (A2A 1.0 when the agent
// offers it, else 0.3), signs the depth the remote work runs at (one deeper
// than the call that invoked) and sends the message without waiting for
// the task to end. The message id is the invocation's, so a retried send
// is the same message to the remote agent.
func (a *Activities) SendMessage(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) (Remote, error) {
	snd, err := a.prepare(ctx, in, false)
	if err != nil {
		return Remote{}, err
	}
	defer snd.client.Destroy()
	return a.send(ctx, snd)
}

// client opens a client to the interface a remote task was opened through.
func (a *Activities) client(ctx context.Context, ref TaskRef) (*a2aclient.Client, error) {
	iface := &a2a.AgentInterface{URL: ref.Endpoint, ProtocolBinding: a2a.TransportProtocol(ref.Binding), ProtocolVersion: a2a.ProtocolVersion(ref.Version)}
	if ref.Binding == "" {
		// A task opened before the mesh spoke 1.0: over 0.3 JSON-RPC.
		iface.ProtocolBinding, iface.ProtocolVersion = a2a.TransportProtocolJSONRPC, a2alink.Version03
	}
	client, err := a2alink.NewClient(ctx, a.HTTP, iface)
	if err != nil {
		return nil, refused(err)
	}
	return client, nil
}

// GetTask reads the remote task.
func (a *Activities) GetTask(ctx context.Context, ref TaskRef) (Remote, error) {
	client, err := a.client(ctx, ref)
	if err != nil {
		return Remote{}, err
	}
	defer client.Destroy()
	task, err := client.GetTask(ctx, &a2a.GetTaskRequest{ID: a2a.TaskID(ref.TaskID)})
	if err != nil {
		return Remote{}, classify(err)
	}
	r := ref.remote()
	r.follow(task)
	return r, nil
}

// CancelTask asks the remote agent to cancel the task. A task the agent
// says it cannot cancel is done with when it has ended; while it still
// runs, the refusal is a race on the agent's side (a cancel that meets the
// end of the send that started the task), so the activity fails and its
// retry asks again.
func (a *Activities) CancelTask(ctx context.Context, ref TaskRef) error {
	client, err := a.client(ctx, ref)
	if err != nil {
		return err
	}
	defer client.Destroy()
	id := a2a.TaskID(ref.TaskID)
	_, err = client.CancelTask(ctx, &a2a.CancelTaskRequest{ID: id})
	if err == nil {
		return nil
	}
	if !errors.Is(err, a2a.ErrTaskNotCancelable) {
		return classify(err)
	}
	task, gerr := client.GetTask(ctx, &a2a.GetTaskRequest{ID: id})
	if gerr != nil {
		return classify(gerr)
	}
	if task.Status.State.Terminal() {
		return nil
	}
	return fmt.Errorf("the agent did not cancel task %s, which is %s: ask again", ref.TaskID, a2alink.StateName(task.Status.State))
}

// RecordOutcome records how the invocation ended with
// RemoteAgentsService, as the worker itself.
func (a *Activities) RecordOutcome(ctx context.Context, req *remoteagentsv1.RecordInvocationOutcomeRequest) error {
	if a.RemoteAgents == nil {
		return errors.New("remoteagents activities: no RemoteAgentsService client")
	}
	_, err := a.RemoteAgents.RecordInvocationOutcome(mesh.WithCall(ctx, mesh.Call{Caller: a.Self}), req)
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeNotFound:
		return temporal.NewNonRetryableApplicationError(err.Error(), "RemoteAgentsServiceRefused", err)
	}
	return err
}

// follow moves r to where task is: its state and what the agent said
// (the artifacts' text, else the status message's).
func (r *Remote) follow(t *a2a.Task) {
	r.TaskID, r.ContextID, r.State = string(t.ID), t.ContextID, a2alink.StateName(t.Status.State)
	var parts []string
	for _, art := range t.Artifacts {
		if art != nil {
			if txt := a2alink.Text(art.Parts); txt != "" {
				parts = append(parts, txt)
			}
		}
	}
	if len(parts) == 0 && t.Status.Message != nil {
		parts = append(parts, a2alink.Text(t.Status.Message.Parts))
	}
	r.Answer = clip(strings.Join(parts, "\n"), 100000)
}

// classify makes a failure no retry changes non-retryable.
func classify(err error) error {
	if a2alink.Permanent(err) {
		return refused(err)
	}
	return errors.New(a2alink.Describe(err))
}

func refused(err error) error {
	return temporal.NewNonRetryableApplicationError(a2alink.Describe(err), ErrTypeRefused, nil)
}

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}
