package remoteagents

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
	remoteagentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/remoteagents/v1"
)

// The A2A tasks that inbound messages open are durable: their rows, their
// event logs and their push configs are in the store, so that any replica
// of the A2A door answers for any task — lists it, streams it from any
// event on, registers webhooks for it — and a restart loses none. Every
// change of a task with push configs is handed to the task's workflow
// (workers/remoteagents), which sends each config its events.

// Limits of the A2A task RPCs.
const (
	// DefaultListSize is the page size of ListInbound when the request
	// names none.
	DefaultListSize = 50
	// maxEventsPage bounds the events one ListInboundEvents returns.
	maxEventsPage = 100
	// eventPoll is how often a ListInboundEvents that waits reads the log.
	eventPoll = 250 * time.Millisecond
	// threadPoll is how often a waiting ListInboundEvents looks for the
	// recipient's answer in the task's thread.
	threadPoll = 2 * time.Second
)

// ListInbound implements InboundService.ListInbound: the caller's tasks to
// an agent, each brought up to date.
func (in *InboundService) ListInbound(ctx context.Context, req *inboundv1.ListInboundRequest) (*inboundv1.ListInboundResponse, error) {
	s := in.s
	from, err := sender(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.needMessages(); err != nil {
		return nil, err
	}
	f := InboundFilter{Sender: from.Agent, AgentID: req.GetAgentId(), ContextID: req.GetContextId(),
		Status: remoteagentsv1.InboundStatus(req.GetStatus()), Limit: int(req.GetPageSize())}
	if f.Limit == 0 {
		f.Limit = DefaultListSize
	}
	if t := req.GetUpdatedAfter(); t != nil {
		f.UpdatedAfter = t.AsTime()
	}
	if tok := req.GetPageToken(); tok != "" {
		c, err := decodeCursor(tok)
		if err != nil {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("page_token: not a token this service gave"))
		}
		f.After = c
	}
	page, total, err := s.store.ListInbound(ctx, f)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list inbound tasks: %w", err))
	}
	out := &inboundv1.ListInboundResponse{TotalSize: int32(total)}
	for _, t := range page {
		cur, err := s.refresh(ctx, t, true)
		if err != nil {
			return nil, err
		}
		conv, err := toInbound(cur)
		if err != nil {
			return nil, err
		}
		out.Inbounds = append(out.Inbounds, conv)
	}
	if len(page) == f.Limit {
		last := page[len(page)-1]
		out.NextPageToken = encodeCursor(&InboundCursor{UpdateMillis: last.GetUpdateTime().AsTime().UnixMilli(), TaskID: last.GetTaskId()})
	}
	return out, nil
}

// encodeCursor is the opaque page token of c.
func encodeCursor(c *InboundCursor) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(c.UpdateMillis, 10) + ":" + c.TaskID))
}

func decodeCursor(tok string) (*InboundCursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, err
	}
	ms, id, ok := strings.Cut(string(b), ":")
	if !ok || id == "" {
		return nil, errors.New("malformed")
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return nil, err
	}
	return &InboundCursor{UpdateMillis: n, TaskID: id}, nil
}

// ListInboundEvents implements InboundService.ListInboundEvents: the log
// after after_seq, waiting (reading the log every eventPoll, and the
// thread every threadPoll) up to wait_seconds for an event.
func (in *InboundService) ListInboundEvents(ctx context.Context, req *inboundv1.ListInboundEventsRequest) (*inboundv1.ListInboundEventsResponse, error) {
	s := in.s
	task, err := s.currentInbound(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Duration(req.GetWaitSeconds()) * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		// Answer before the caller stops waiting.
		deadline = d.Add(-time.Second)
	}
	lastThread := time.Now()
	for {
		if task.GetVersion() > req.GetAfterSeq() {
			evs, err := s.store.InboundEvents(ctx, task.GetTaskId(), req.GetAfterSeq(), maxEventsPage)
			if err != nil {
				return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list inbound events: %w", err))
			}
			if len(evs) > 0 {
				conv, err := toInbound(task)
				if err != nil {
					return nil, err
				}
				return &inboundv1.ListInboundEventsResponse{Events: evs, Inbound: conv}, nil
			}
		}
		if !time.Now().Add(eventPoll).Before(deadline) {
			conv, err := toInbound(task)
			if err != nil {
				return nil, err
			}
			return &inboundv1.ListInboundEventsResponse{Inbound: conv}, nil
		}
		select {
		case <-ctx.Done():
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		case <-time.After(eventPoll):
		}
		if task, err = s.store.GetInbound(ctx, req.GetTaskId()); err != nil {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get inbound task: %w", err))
		}
		if time.Since(lastThread) >= threadPoll {
			lastThread = time.Now()
			if task, err = s.refresh(ctx, task, true); err != nil {
				return nil, err
			}
		}
	}
}

// CreatePushConfig implements InboundService.CreatePushConfig: the
// webhook's address must pass the egress guard now, and passes it again at
// every push.
func (in *InboundService) CreatePushConfig(ctx context.Context, req *inboundv1.CreatePushConfigRequest) (*inboundv1.CreatePushConfigResponse, error) {
	s := in.s
	task, err := s.ownInbound(ctx, req.GetTaskId())
	if err != nil {
		return nil, err
	}
	if err := s.checkURL(ctx, req.GetUrl()); err != nil {
		return nil, err
	}
	id := req.GetConfigId()
	if id == "" {
		id = ids.NewAt("pcfg", s.nowMillis())
	}
	c, err := s.store.SavePushConfig(ctx, &inboundv1.PushConfig{TaskId: task.GetTaskId(), ConfigId: id, Url: req.GetUrl(), Token: req.GetToken(),
		AuthScheme: req.GetAuthScheme(), AuthCredentials: req.GetAuthCredentials(), CreateTime: timestamppb.New(s.nowMillis())})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("save push config: %w", err))
	}
	s.log.InfoContext(ctx, "remoteagents.push_config_created", "task_id", task.GetTaskId(), "config_id", id, "sender", task.GetSender())
	if task.GetStatus() == inboundWorking {
		s.notifyInbound(ctx, task)
	}
	return &inboundv1.CreatePushConfigResponse{Config: c}, nil
}

// GetPushConfig implements InboundService.GetPushConfig.
func (in *InboundService) GetPushConfig(ctx context.Context, req *inboundv1.GetPushConfigRequest) (*inboundv1.GetPushConfigResponse, error) {
	if _, err := in.s.ownInbound(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	c, err := in.s.store.PushConfig(ctx, req.GetTaskId(), req.GetConfigId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("push config %s of task %s not found", req.GetConfigId(), req.GetTaskId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get push config: %w", err))
	}
	return &inboundv1.GetPushConfigResponse{Config: c}, nil
}

// ListPushConfigs implements InboundService.ListPushConfigs.
func (in *InboundService) ListPushConfigs(ctx context.Context, req *inboundv1.ListPushConfigsRequest) (*inboundv1.ListPushConfigsResponse, error) {
	if _, err := in.s.ownInbound(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	cs, err := in.s.store.PushConfigs(ctx, req.GetTaskId())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list push configs: %w", err))
	}
	return &inboundv1.ListPushConfigsResponse{Configs: cs}, nil
}

// DeletePushConfig implements InboundService.DeletePushConfig.
func (in *InboundService) DeletePushConfig(ctx context.Context, req *inboundv1.DeletePushConfigRequest) (*inboundv1.DeletePushConfigResponse, error) {
	if _, err := in.s.ownInbound(ctx, req.GetTaskId()); err != nil {
		return nil, err
	}
	if err := in.s.store.DeletePushConfig(ctx, req.GetTaskId(), req.GetConfigId()); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("delete push config: %w", err))
	}
	return &inboundv1.DeletePushConfigResponse{}, nil
}

// notifyInbound hands a change of a task that has push configs to its
// workflow. A failure is logged: the change is in the store, and the next
// change, or the workflow's own look at the task, sends it.
func (s *Service) notifyInbound(ctx context.Context, in *remoteagentsv1.Inbound) {
	if s.wf == nil {
		return
	}
	cs, err := s.store.PushConfigs(ctx, in.GetTaskId())
	if err != nil || len(cs) == 0 {
		if err != nil {
			s.log.WarnContext(ctx, "remoteagents.push_notify_failed", "task_id", in.GetTaskId(), "error", err)
		}
		return
	}
	if err := s.wf.NotifyInbound(ctx, &remoteagentsv1.InboundWorkflowInput{TaskId: in.GetTaskId(), AgentId: in.GetAgentId(), Sender: in.GetSender()}); err != nil {
		s.log.WarnContext(ctx, "remoteagents.push_notify_failed", "task_id", in.GetTaskId(), "error", err)
	}
}

// RefreshInbound implements RemoteAgentsService.RefreshInbound, for the
// inbound task workflow (mesh service role).
func (s *Service) RefreshInbound(ctx context.Context, req *remoteagentsv1.RefreshInboundRequest) (*remoteagentsv1.RefreshInboundResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	if err := s.needMessages(); err != nil {
		return nil, err
	}
	task, err := s.store.GetInbound(ctx, req.GetTaskId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("task %s not found", req.GetTaskId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get inbound task: %w", err))
	}
	// The workflow asks: it looks at the task's configs next, so it needs
	// no notice of the change it finds.
	if task, err = s.refresh(ctx, task, false); err != nil {
		return nil, err
	}
	cs, err := s.store.PushConfigs(ctx, task.GetTaskId())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list push configs: %w", err))
	}
	conv, err := toInbound(task)
	if err != nil {
		return nil, err
	}
	return &remoteagentsv1.RefreshInboundResponse{Inbound: conv, Configs: cs}, nil
}

// GetPushDelivery implements RemoteAgentsService.GetPushDelivery, for the
// inbound task workflow (mesh service role).
func (s *Service) GetPushDelivery(ctx context.Context, req *remoteagentsv1.GetPushDeliveryRequest) (*remoteagentsv1.GetPushDeliveryResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	c, err := s.store.PushConfig(ctx, req.GetTaskId(), req.GetConfigId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("push config %s of task %s not found", req.GetConfigId(), req.GetTaskId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get push config: %w", err))
	}
	task, err := s.store.GetInbound(ctx, req.GetTaskId())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get inbound task: %w", err))
	}
	evs, err := s.store.InboundEvents(ctx, req.GetTaskId(), req.GetSeq()-1, 1)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get inbound event: %w", err))
	}
	if len(evs) == 0 {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("event %d of task %s not found", req.GetSeq(), req.GetTaskId()))
	}
	conv, err := toInbound(task)
	if err != nil {
		return nil, err
	}
	return &remoteagentsv1.GetPushDeliveryResponse{Config: c, Inbound: conv, Event: evs[0]}, nil
}

// RecordPushDelivered implements RemoteAgentsService.RecordPushDelivered,
// for the inbound task workflow (mesh service role).
func (s *Service) RecordPushDelivered(ctx context.Context, req *remoteagentsv1.RecordPushDeliveredRequest) (*remoteagentsv1.RecordPushDeliveredResponse, error) {
	if _, err := mesh.RequireRole(ctx, mesh.RoleService); err != nil {
		return nil, err
	}
	if err := s.store.RecordPushDelivered(ctx, req.GetTaskId(), req.GetConfigId(), req.GetSeq()); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("record push delivered: %w", err))
	}
	return &remoteagentsv1.RecordPushDeliveredResponse{}, nil
}

// toInbound is a task as the inbound contract shows it (the messages are
// wire twins).
func toInbound(in *remoteagentsv1.Inbound) (*inboundv1.Inbound, error) {
	out := &inboundv1.Inbound{}
	if err := convert(in, out); err != nil {
		return nil, err
	}
	return out, nil
}
