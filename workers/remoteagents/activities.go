package remoteagents

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/a2a"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/a2alink"
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
	// RemoteAgents reaches RemoteAgentsService; its client must send the
	// identity in the call's context as a mesh token.
	RemoteAgents remoteagentsv1connect.RemoteAgentsServiceClient
	// Self is the worker's own identity (mesh.RoleService).
	Self mesh.Caller
	// Log receives the activities' events.
	Log *slog.Logger
}

// SendMessage sends the invocation's message to the remote agent: it reads
// the agent's card, signs the depth the remote work runs at (one deeper
// than the call that invoked) and sends message/send without blocking.
// The message id is the invocation's, so a retried send is the same
// message to the remote agent.
func (a *Activities) SendMessage(ctx context.Context, in *remoteagentsv1.InvokeWorkflowInput) (Remote, error) {
	card, err := a2alink.ResolveCard(ctx, a.HTTP, in.GetUrl())
	if err != nil {
		return Remote{}, classify(err)
	}
	client, err := a2alink.NewClient(ctx, a.HTTP, card, "")
	if err != nil {
		return Remote{}, refused(err)
	}
	defer client.Destroy()
	msg := &a2a.Message{
		ID:        in.GetMessageId(),
		Role:      a2a.MessageRoleUser,
		Parts:     a2a.ContentParts{a2a.TextPart{Text: in.GetMessage()}},
		TaskID:    a2a.TaskID(in.GetTaskId()),
		ContextID: in.GetContextId(),
	}
	if a.Depth != nil {
		tok, err := a.Depth.Sign(card.URL, in.GetAgentId(), in.GetMessageId(), int(in.GetDepth())+1, time.Now())
		if err != nil {
			return Remote{}, refused(err)
		}
		msg.Metadata = map[string]any{a2alink.MetadataDepthToken: tok}
		msg.Extensions = []string{a2alink.DepthExtension}
	}
	res, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: msg})
	if err != nil {
		return Remote{}, classify(err)
	}
	switch r := res.(type) {
	case *a2a.Message:
		return Remote{Endpoint: card.URL, ContextID: r.ContextID, State: string(a2a.TaskStateCompleted), Answer: a2alink.Text(r.Parts)}, nil
	case *a2a.Task:
		return remoteOf(card.URL, r), nil
	}
	return Remote{}, refused(a2a.ErrInvalidAgentResponse)
}

// GetTask reads the remote task (tasks/get).
func (a *Activities) GetTask(ctx context.Context, ref TaskRef) (Remote, error) {
	client, err := a2alink.NewClient(ctx, a.HTTP, nil, ref.Endpoint)
	if err != nil {
		return Remote{}, refused(err)
	}
	defer client.Destroy()
	task, err := client.GetTask(ctx, &a2a.TaskQueryParams{ID: a2a.TaskID(ref.TaskID)})
	if err != nil {
		return Remote{}, classify(err)
	}
	return remoteOf(ref.Endpoint, task), nil
}

// CancelTask asks the remote agent to cancel the task (tasks/cancel). A
// task that can no longer be cancelled has ended: nothing to do.
func (a *Activities) CancelTask(ctx context.Context, ref TaskRef) error {
	client, err := a2alink.NewClient(ctx, a.HTTP, nil, ref.Endpoint)
	if err != nil {
		return refused(err)
	}
	defer client.Destroy()
	if _, err := client.CancelTask(ctx, &a2a.TaskIDParams{ID: a2a.TaskID(ref.TaskID)}); err != nil && !errors.Is(err, a2a.ErrTaskNotCancelable) {
		return classify(err)
	}
	return nil
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

// remoteOf is where a task is: its state and what the agent said (the
// artifacts' text, else the status message's).
func remoteOf(endpoint string, t *a2a.Task) Remote {
	r := Remote{Endpoint: endpoint, TaskID: string(t.ID), ContextID: t.ContextID, State: string(t.Status.State)}
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
	return r
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
