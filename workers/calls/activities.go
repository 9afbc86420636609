package calls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/telemetry"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	callsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/calls/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1/toolv1connect"
)

// Config is what the activities need.
type Config struct {
	// Contracts are the services whose tools may be called (default
	// toolcatalog.Contracts()).
	Contracts []protoreflect.ServiceDescriptor
	// Services maps fully-qualified service names to base URLs.
	Services map[string]string
	// HTTPClient reaches the services (default meshclient.HTTP()).
	HTTPClient *http.Client
	// Mesh signs the mesh token each service call carries. Required.
	Mesh *mesh.Signer
	// Log receives the activities' events.
	Log *slog.Logger
	// Telemetry makes each service call a span of the call's trace (a
	// call's side effect continues the trace of the tools/call).
	Telemetry telemetry.Providers
}

// Activities call tools' services for elicited calls.
type Activities struct {
	bindings map[string]*toolcall.Binding
	// visits reach each service's VisitService, by service name.
	visits map[string]toolv1connect.VisitServiceClient
	mesh   *mesh.Signer
	audit  *audittrail.Recorder
	log    *slog.Logger
}

// NewActivities binds every tool of the contracts to its service. A call's
// deadline is the one it carries (InvokeInput.timeout: the edge's call
// timeout), not the worker's.
func NewActivities(cfg Config) (*Activities, error) {
	if cfg.Mesh == nil {
		return nil, errors.New("calls: no mesh signing key configured")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = meshclient.HTTP()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	bindings, err := toolcall.BindAll(toolcall.BindConfig{
		Contracts: cfg.Contracts, Services: cfg.Services, HTTPClient: cfg.HTTPClient,
		Log: cfg.Log, ClientOptions: []connect.ClientOption{cfg.Telemetry.ClientOption()},
	})
	if err != nil {
		return nil, err
	}
	mc := meshclient.Config{HTTP: cfg.HTTPClient, Signer: cfg.Mesh, Telemetry: cfg.Telemetry}
	a := &Activities{bindings: bindings, mesh: cfg.Mesh, log: cfg.Log, visits: map[string]toolv1connect.VisitServiceClient{},
		audit: audittrail.Dial(mc, cfg.Services)}
	for name, url := range cfg.Services {
		if url != "" {
			a.visits[name] = meshclient.New(mc, toolv1connect.NewVisitServiceClient, url)
		}
	}
	return a, nil
}

// Register adds the workflow and the activities to w.
func Register(w worker.Registry, a *Activities) {
	RegisterWorkflows(w)
	RegisterActivities(w, a)
}

// RegisterWorkflows adds the elicited call workflow, under its contract
// name, to r (a worker or a replayer).
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(ElicitedCall, workflow.RegisterOptions{Name: Contract().Name})
}

// RegisterActivities adds the activities of a to r, under their names.
func RegisterActivities(r worker.ActivityRegistry, a *Activities) {
	r.RegisterActivityWithOptions(a.Invoke, activity.RegisterOptions{Name: ActivityInvoke})
	r.RegisterActivityWithOptions(a.Preview, activity.RegisterOptions{Name: ActivityPreview})
	r.RegisterActivityWithOptions(a.RecordExtension, activity.RegisterOptions{Name: ActivityRecordExtension})
	r.RegisterActivityWithOptions(a.EndVisit, activity.RegisterOptions{Name: ActivityEndVisit})
}

// EndVisit tells the tool's service that the call which asked for a visit
// ended without it (toolmesh.tool.v1.VisitService.EndVisit), as the call's
// caller and under its idempotency key. Only an unreachable service fails
// the attempt (it is retried); a service that serves no VisitService is
// logged.
func (a *Activities) EndVisit(ctx context.Context, in *callsv1.EndVisitInput) error {
	b, ok := a.bindings[in.GetTool()]
	var vc toolv1connect.VisitServiceClient
	if ok {
		vc = a.visits[b.Tool().Service]
	}
	if vc == nil {
		a.log.WarnContext(ctx, "calls.end_visit_unreachable", "tool", in.GetTool(), "visit", in.GetVisitId(), "message", "the tool's service is not configured")
		return nil
	}
	caller := toolcall.CallerOf(in.GetCaller())
	_, err := vc.EndVisit(mesh.WithCall(ctx, mesh.Call{Caller: caller, IdempotencyKey: in.GetIdempotencyKey()}),
		&toolv1.EndVisitRequest{VisitId: in.GetVisitId()})
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeUnknown:
		if err != nil {
			return err
		}
	}
	if err != nil {
		a.log.WarnContext(ctx, "calls.end_visit_refused", "tool", in.GetTool(), "visit", in.GetVisitId(), "agent", caller.Agent, "error", err.Error())
		return nil
	}
	a.log.InfoContext(ctx, "calls.visit_ended", "tool", in.GetTool(), "visit", in.GetVisitId(), "agent", caller.Agent, "call_id", in.GetIdempotencyKey())
	return nil
}

// RecordExtension records a task's extension in the audit trail under its
// call id (tool calls_extend_task, the caller's subject as actor, the
// reason), so a retried attempt writes one record.
func (a *Activities) RecordExtension(ctx context.Context, up *callsv1.ExtendTaskUpdate) error {
	if a.audit == nil {
		a.log.WarnContext(ctx, "calls.task_extension_unaudited", "call_id", up.GetCallId(), "subject", up.GetCaller().GetSubject(),
			"task_id", up.GetRequest().GetTaskId(), "message", "no audit service configured")
		return nil
	}
	_, err := a.audit.Record(ctx, audittrail.Entry{CallID: up.GetCallId(), Actor: up.GetCaller().GetSubject(), Tool: ToolExtendTask,
		Reason: up.GetReason(), Arguments: up.GetRequest()})
	return err
}

// errUnavailable is the failure type of an attempt whose service was
// unreachable: the activity is retried.
const errUnavailable = "Unavailable"

// Invoke calls the tool with the call's complete arguments and idempotency
// key: the side effect of an elicited call. An ADMIN call that succeeds is
// recorded in the audit trail under the same key, so a retried attempt
// neither applies nor records twice. Every outcome is an envelope; only an
// unreachable service fails the attempt, so that it is retried.
func (a *Activities) Invoke(ctx context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
	b, ok := a.bindings[in.GetTool()]
	if !ok {
		return output(toolcall.Fail(in.GetTool(), toolcall.CodeNotSupported, fmt.Sprintf("tool %s is not known to the calls worker", in.GetTool())))
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in.GetArguments()), &args); err != nil {
		return output(toolcall.Invalid(in.GetTool(), []boundary.Violation{{Rule: "arguments.object", Message: "arguments must be a JSON object"}}))
	}
	raw, reason := json.RawMessage(in.GetArguments()), ""
	if in.GetAudit() {
		var err error
		if raw, reason, err = toolcall.StripAdmin(args, b.Input()); err != nil {
			return output(toolcall.Unexpected(ctx, a.log, in.GetTool(), err))
		}
	}
	msg, vs := b.Decode(ctx, raw)
	if vs != nil {
		return output(toolcall.Invalid(in.GetTool(), vs))
	}
	caller := toolcall.CallerOf(in.GetCaller())
	ctx, cancel := callDeadline(ctx, in)
	defer cancel()
	defer heartbeat(ctx)()
	env := b.Invoke(ctx, msg, a.mesh, mesh.Call{Caller: caller, IdempotencyKey: in.GetIdempotencyKey()})
	if env.DomainCode == toolcall.CodeUnavailable {
		return nil, unavailable(env)
	}
	a.log.InfoContext(ctx, "calls.invoked", "tool", in.GetTool(), "subject", caller.Subject, "agent", caller.Agent,
		"status", env.Status, "domain_code", env.DomainCode, "call_id", in.GetIdempotencyKey(), "attempt", activity.GetInfo(ctx).Attempt)
	if in.GetAudit() && !env.IsError() {
		if a.audit != nil {
			_, err := a.audit.Record(ctx, audittrail.Entry{CallID: in.GetIdempotencyKey(), Actor: caller.Subject, Tool: in.GetTool(), Reason: reason, Arguments: msg,
				Replayed: env.Replayed, ReplayOf: env.ReplayOf})
			if err != nil {
				// The action happened; the record is retried with the activity
				// only when the service call itself failed.
				a.log.ErrorContext(ctx, "audit.append_failed", "tool", in.GetTool(), "subject", caller.Subject, "call_id", in.GetIdempotencyKey(), "error", err)
			}
		}
	}
	return output(env)
}

// Preview calls a READ tool with those of the call's arguments it takes.
func (a *Activities) Preview(ctx context.Context, in *callsv1.InvokeInput) (*callsv1.InvokeOutput, error) {
	b, ok := a.bindings[in.GetTool()]
	if !ok {
		return output(toolcall.Fail(in.GetTool(), toolcall.CodeNotSupported, fmt.Sprintf("preview tool %s is not known to the calls worker", in.GetTool())))
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal([]byte(in.GetArguments()), &args); err != nil {
		return output(toolcall.Invalid(in.GetTool(), []boundary.Violation{{Rule: "arguments.object", Message: "arguments must be a JSON object"}}))
	}
	fields := b.Input().Fields()
	for k := range args {
		if fields.ByName(protoreflect.Name(k)) == nil {
			delete(args, k)
		}
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return output(toolcall.Unexpected(ctx, a.log, in.GetTool(), fmt.Errorf("re-encode preview arguments: %w", err)))
	}
	msg, vs := b.Decode(ctx, raw)
	if vs != nil {
		return output(toolcall.Invalid(in.GetTool(), vs))
	}
	ctx, cancel := callDeadline(ctx, in)
	defer cancel()
	env := b.Invoke(ctx, msg, a.mesh, mesh.Call{Caller: toolcall.CallerOf(in.GetCaller())})
	if env.DomainCode == toolcall.CodeUnavailable {
		return nil, unavailable(env)
	}
	return output(env)
}

// heartbeat beats for an attempt that must (a task's side effect, which
// may run long) until the returned stop: a beat is how the attempt learns
// that its workflow was cancelled, which cancels ctx and so the service
// call.
func heartbeat(ctx context.Context) (stop func()) {
	info := activity.GetInfo(ctx)
	if info.IsLocalActivity || info.HeartbeatTimeout <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(info.HeartbeatTimeout / 4)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}

// callDeadline bounds the service call by the call's own deadline (the
// edge's call timeout), not the activity's, which leaves room to report.
func callDeadline(ctx context.Context, in *callsv1.InvokeInput) (context.Context, context.CancelFunc) {
	if d := in.GetTimeout().AsDuration(); d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

// unavailable fails an attempt whose service was unreachable (it is
// retried); the envelope goes with it, so that the workflow answers with the
// last attempt's envelope, error id included.
func unavailable(env *toolcall.Envelope) error {
	out, err := output(env)
	if err != nil {
		return err
	}
	return temporal.NewApplicationError(env.Message, errUnavailable, out.GetEnvelope())
}

func output(env *toolcall.Envelope) (*callsv1.InvokeOutput, error) {
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return &callsv1.InvokeOutput{Envelope: string(b), Visit: env.Visit}, nil
}
