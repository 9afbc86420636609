package remoteagents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/a2aproject/a2a-go/v2/a2a"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/workflowcontract"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// The inbound task workflow (remoteagents.inbound) pushes an inbound A2A
// task's events to its webhooks: it reads the task and its push configs
// (RefreshInbound, which also completes a task its recipient answered),
// sends each config every event after the last it was sent, one push per
// event, in order (DeliverPush: a Temporal activity, retried with backoff
// for a day), and ends once the task has ended and every config has been
// sent everything. A signal ("changed") makes it look again at once;
// otherwise it looks at growing intervals, as the answer comes through the
// recipient's inbox, which tells nobody.

// Activity names of the inbound task workflow. Never change one.
const (
	ActivityRefreshInbound = "RefreshInbound"
	ActivityDeliverPush    = "DeliverPush"
)

// Look intervals of the inbound task workflow: the first look after a
// quiet one comes FirstLook later, each next one twice as late, at most
// MaxLook; a signal resets them.
const (
	FirstLook = time.Second
	MaxLook   = time.Minute
)

// looksPerRun bounds a run's history: after that many looks the workflow
// continues as new.
const looksPerRun = 500

func inboundContract() workflowcontract.Workflow {
	return workflowcontract.WorkflowOf(&remoteagentsv1.InboundWorkflowInput{})
}

func changedSignal() workflowcontract.Handler {
	return workflowcontract.HandlerOf(&remoteagentsv1.InboundChangedSignal{})
}

// PushRef names one push: an event of a task, to one of its configs.
type PushRef struct {
	TaskID   string `json:"task_id"`
	ConfigID string `json:"config_id"`
	Seq      int64  `json:"seq"`
}

var refreshOpts = workflow.ActivityOptions{
	StartToCloseTimeout: 30 * time.Second,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute},
	Summary:             "Read the task and its push configs",
}

// pushOpts retry a push with backoff for up to a day: a webhook that is
// down for a while gets every event when it is back.
var pushOpts = workflow.ActivityOptions{
	StartToCloseTimeout:    time.Minute,
	ScheduleToCloseTimeout: 24 * time.Hour,
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 10 * time.Minute,
		NonRetryableErrorTypes: []string{ErrTypeRefused}},
	Summary: "Push an event of the task to a webhook",
}

// InboundWorkflow is the remoteagents.inbound workflow.
func InboundWorkflow(ctx workflow.Context, in *remoteagentsv1.InboundWorkflowInput) error {
	log := workflow.GetLogger(ctx)
	changed := workflow.GetSignalChannel(ctx, changedSignal().Name)
	// given up: configs whose push failed for good are skipped from the
	// event that failed on.
	givenUp := map[string]bool{}
	wait := FirstLook
	for look := 0; ; look++ {
		if look == looksPerRun {
			// Drain pending signals: the next run looks at once anyway.
			for changed.ReceiveAsync(nil) {
			}
			return workflow.NewContinueAsNewError(ctx, inboundContract().Name, in)
		}
		cur := &remoteagentsv1.RefreshInboundResponse{}
		if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, refreshOpts), ActivityRefreshInbound,
			in).Get(ctx, cur); err != nil {
			return err
		}
		task := cur.GetInbound()
		sent := false
		for _, c := range cur.GetConfigs() {
			for seq := c.GetDeliveredSeq() + 1; seq <= task.GetVersion() && !givenUp[c.GetConfigId()]; seq++ {
				ref := PushRef{TaskID: in.GetTaskId(), ConfigID: c.GetConfigId(), Seq: seq}
				if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, pushOpts), ActivityDeliverPush, ref).Get(ctx, nil); err != nil {
					if temporal.IsCanceledError(err) {
						return err
					}
					log.Warn("remoteagents.push_given_up", "task_id", in.GetTaskId(), "config_id", c.GetConfigId(), "seq", seq, "error", err)
					givenUp[c.GetConfigId()] = true
				}
				sent = true
			}
		}
		if a2alink.Ended(task) && !sent {
			workflow.SetCurrentDetails(ctx, "The task ended; every webhook was sent its events.")
			return nil
		}
		if sent {
			wait = FirstLook
		}
		workflow.SetCurrentDetails(ctx, fmt.Sprintf("Task %s is at event %d; looking again within %s.", in.GetTaskId(), task.GetVersion(), wait))
		woke := false
		s := workflow.NewSelector(ctx)
		s.AddReceive(changed, func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			woke = true
		})
		tctx, cancel := workflow.WithCancel(ctx)
		s.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) {})
		s.Select(ctx)
		cancel()
		if ctx.Err() != nil {
			return temporal.NewCanceledError("the inbound task workflow was cancelled")
		}
		if woke {
			wait = FirstLook
		} else {
			wait = min(2*wait, MaxLook)
		}
	}
}

// RefreshInbound reads the task, brought up to date, and its push configs
// from RemoteAgentsService. It calls as the task's sender (a mesh service,
// as the A2A door calls for it): bringing the task up to date reads the
// message's thread, which only its participants may read.
func (a *Activities) RefreshInbound(ctx context.Context, in *remoteagentsv1.InboundWorkflowInput) (*remoteagentsv1.RefreshInboundResponse, error) {
	if a.RemoteAgents == nil {
		return nil, errors.New("remoteagents activities: no RemoteAgentsService client")
	}
	sender := mesh.Caller{Subject: in.GetSender(), Agent: in.GetSender(), Roles: []string{mesh.RoleService}}
	res, err := a.RemoteAgents.RefreshInbound(mesh.WithCall(ctx, mesh.Call{Caller: sender}), &remoteagentsv1.RefreshInboundRequest{TaskId: in.GetTaskId()})
	if err != nil {
		return nil, serviceError(err)
	}
	return res, nil
}

// DeliverPush sends one event of a task to one of its webhooks, then
// records it sent. The body is the event as A2A streams it (a
// StreamResponse), carrying its id (EventsExtension) — the same id on
// every attempt, so a receiver dedupes what a retry sends twice. The push
// goes through the egress guard (the activities' HTTP client) and is
// signed with the mesh's key (a2alink.PushSigner, in PushSignatureHeader);
// it carries the config's token and credentials as A2A says. A webhook
// that answers 2xx has it; 408, 429 and 5xx are tried again; any other
// answer, or an address the guard refuses, is a refusal no retry changes.
func (a *Activities) DeliverPush(ctx context.Context, ref PushRef) error {
	if a.RemoteAgents == nil {
		return errors.New("remoteagents activities: no RemoteAgentsService client")
	}
	self := mesh.WithCall(ctx, mesh.Call{Caller: a.Self})
	d, err := a.RemoteAgents.GetPushDelivery(self, &remoteagentsv1.GetPushDeliveryRequest{TaskId: ref.TaskID, ConfigId: ref.ConfigID, Seq: ref.Seq})
	if connect.CodeOf(err) == connect.CodeNotFound {
		// The config was deleted (or the event is not there): nothing to send.
		return nil
	}
	if err != nil {
		return serviceError(err)
	}
	body, err := json.Marshal(a2a.StreamResponse{Event: a2alink.Event(d.GetInbound(), d.GetEvent())})
	if err != nil {
		return refused(err)
	}
	if err := a.post(ctx, d.GetConfig(), ref, body); err != nil {
		return err
	}
	if _, err := a.RemoteAgents.RecordPushDelivered(self, &remoteagentsv1.RecordPushDeliveredRequest{TaskId: ref.TaskID, ConfigId: ref.ConfigID, Seq: ref.Seq}); err != nil {
		return serviceError(err)
	}
	return nil
}

// post POSTs one push's body to the config's webhook.
func (a *Activities) post(ctx context.Context, c *inboundv1.PushConfig, ref PushRef, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.GetUrl(), bytes.NewReader(body))
	if err != nil {
		return refused(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(a2alink.PushEventIDHeader, a2alink.EventID(ref.TaskID, ref.Seq))
	if tok := c.GetToken(); tok != "" {
		// A2A 1.0 names the header X-A2A-Notification-Token; a2a-go's
		// receivers read A2A-Notification-Token.
		req.Header.Set("X-A2A-Notification-Token", tok)
		req.Header.Set("A2A-Notification-Token", tok)
	}
	var sig string
	if a.Push != nil {
		if sig, err = a.Push.Sign(c.GetUrl(), ref.TaskID, ref.Seq, body, time.Now()); err != nil {
			return refused(err)
		}
		req.Header.Set(a2alink.PushSignatureHeader, sig)
	}
	switch scheme := strings.ToLower(c.GetAuthScheme()); {
	case scheme == "bearer" && c.GetAuthCredentials() == "" && sig != "":
		// The mesh's signature is the bearer token the webhook asked for.
		req.Header.Set("Authorization", "Bearer "+sig)
	case (scheme == "bearer" || scheme == "basic") && c.GetAuthCredentials() != "":
		req.Header.Set("Authorization", c.GetAuthScheme()+" "+c.GetAuthCredentials())
	}
	resp, err := a.HTTP.Do(req)
	if err != nil {
		return classify(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch st := resp.StatusCode; {
	case st >= 200 && st < 300:
		return nil
	case st == http.StatusRequestTimeout || st == http.StatusTooManyRequests || st >= 500:
		return fmt.Errorf("the webhook answered %d: try again", st)
	default:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("the webhook refused the push: %d", st), ErrTypeRefused, nil)
	}
}

// serviceError makes a refusal of RemoteAgentsService non-retryable.
func serviceError(err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeInvalidArgument, connect.CodePermissionDenied, connect.CodeUnauthenticated, connect.CodeNotFound:
		return temporal.NewNonRetryableApplicationError(err.Error(), "RemoteAgentsServiceRefused", err)
	}
	return err
}
