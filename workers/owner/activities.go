package owner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"unicode/utf8"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/temporal"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/mesh"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1/ownerv1connect"
)

// Activities are the ask workflow's calls to OwnerService, made through
// the generated client with a mesh token for each call's identity.
type Activities struct {
	// Owner reaches OwnerService; its client must send the identity in the
	// call's context as a mesh token (mesh.NewClientInterceptor).
	Owner ownerv1connect.OwnerServiceClient
	// Self is the worker's own identity (mesh.RoleService), for the calls
	// it makes for itself.
	Self mesh.Caller
	// Audit records extensions in the audit trail; without it they are
	// only logged.
	Audit *audittrail.Recorder
	// Log receives the activities' events (discarded when nil).
	Log *slog.Logger
}

// NotifyOwner tells the owner about the ask through the owner's
// notification channels, acting for the asking agent (one level deeper
// than the call that asked).
func (a *Activities) NotifyOwner(ctx context.Context, in *ownerv1.AskWorkflowInput) error {
	if a.Owner == nil {
		return errNoClient
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: in.GetSubject(), Agent: in.GetAgentId(), Depth: int(in.GetDepth()) + 1}})
	_, err := a.Owner.Notify(ctx, &ownerv1.NotifyRequest{
		Title:   clip("Question from "+in.GetAgentId(), 200),
		Message: askMessage(in),
		Level:   ownerv1.NotificationLevel_NOTIFICATION_LEVEL_WARNING,
	})
	return retryable(err)
}

// askMessage is the notification of an ask: the question, the choices and
// how to answer.
func askMessage(in *ownerv1.AskWorkflowInput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s asks: %s\n", in.GetAgentId(), clip(in.GetQuestion(), 2000))
	if opts := in.GetOptions(); len(opts) > 0 {
		fmt.Fprintf(&b, "Answer with one of: %s\n", strings.Join(opts, " | "))
	}
	if c := in.GetContext(); c != "" {
		fmt.Fprintf(&b, "Context: %s\n", clip(c, 1000))
	}
	fmt.Fprintf(&b, "Answer it with owner_answer (ask_id %s), or in the Temporal UI on workflow ask/%s/%s (the answer update).",
		in.GetAskId(), in.GetAgentId(), in.GetAskId())
	return clip(b.String(), 4000)
}

// RecordOutcome records how the ask ended with OwnerService, as the worker
// itself.
func (a *Activities) RecordOutcome(ctx context.Context, req *ownerv1.RecordAskOutcomeRequest) error {
	if a.Owner == nil {
		return errNoClient
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a.Self})
	_, err := a.Owner.RecordAskOutcome(ctx, req)
	return retryable(err)
}

// RecordExtension records an ask's extension in the audit trail under its
// call id, so a retried attempt writes one record.
func (a *Activities) RecordExtension(ctx context.Context, up *ownerv1.ExtendUpdate) error {
	if a.Audit == nil {
		if a.Log != nil {
			a.Log.WarnContext(ctx, "owner.ask_extension_unaudited", "call_id", up.GetCallId(), "subject", up.GetRequestedBy(),
				"ask_id", up.GetRequest().GetAskId(), "message", "no audit service configured")
		}
		return nil
	}
	_, err := a.Audit.Record(ctx, audittrail.Entry{CallID: up.GetCallId(), Actor: up.GetRequestedBy(), Tool: ToolExtendAsk,
		Reason: up.GetReason(), Arguments: up.GetRequest()})
	return err
}

// ToolExtendAsk names the tool of an extension in the audit trail.
const ToolExtendAsk = "owner_extend_ask"

// retryable marks the failures that no retry can fix as non-retryable:
// the service refused the request itself (invalid, not allowed, missing,
// lacking a channel).
func retryable(err error) error {
	if err == nil {
		return nil
	}
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated,
		connect.CodeNotFound, connect.CodeFailedPrecondition:
		return temporal.NewNonRetryableApplicationError(err.Error(), "OwnerServiceRefused", err)
	}
	return err
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// errNoClient is returned by activities built without a service client.
var errNoClient = errors.New("owner activities: no OwnerService client")
