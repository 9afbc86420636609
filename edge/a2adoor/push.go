package a2adoor

import (
	"context"
	"fmt"
	"net/url"
	"regexp"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/toolmesh/toolmesh/internal/boundary"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// Push configs are the contract's (CreatePushConfig and the rest): the
// remoteagents domain keeps them with the task, checks each webhook
// against the egress guard, and its workflow sends each config the task's
// later events, signed with the mesh's key (docs/a2a.md).

// configID is what a push config id may be.
var configID = regexp.MustCompile(`^[A-Za-z0-9._~-]{1,128}$`)

// checkPushConfig checks a push config at the boundary; withTask says the
// request must name the task (it is not a send's configuration).
func checkPushConfig(pc *a2a.PushConfig, withTask bool) []boundary.Violation {
	var vs []boundary.Violation
	if withTask {
		vs = append(vs, checkTaskID("taskId", pc.TaskID)...)
	}
	if pc.ID != "" && !configID.MatchString(pc.ID) {
		vs = append(vs, boundary.Violation{Field: "id", Rule: "string.pattern", Message: "1 to 128 of A-Z a-z 0-9 . _ ~ -"})
	}
	if u, err := url.Parse(pc.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || len(pc.URL) > 2048 {
		vs = append(vs, boundary.Violation{Field: "url", Rule: "string.uri", Message: "must be an http or https URL of at most 2048 bytes"})
	}
	if len(pc.Token) > 1024 {
		vs = append(vs, boundary.Violation{Field: "token", Rule: "string.max_len", Message: "at most 1024 bytes"})
	}
	if a := pc.Auth; a != nil && (len(a.Scheme) > 64 || len(a.Credentials) > 4096) {
		vs = append(vs, boundary.Violation{Field: "authentication", Rule: "string.max_len", Message: "scheme at most 64 bytes, credentials 4096"})
	}
	return vs
}

// pushConfig is a contract config as A2A shows it.
func pushConfig(c *inboundv1.PushConfig) *a2a.PushConfig {
	out := &a2a.PushConfig{TaskID: a2a.TaskID(c.GetTaskId()), ID: c.GetConfigId(), URL: c.GetUrl(), Token: c.GetToken()}
	if c.GetAuthScheme() != "" {
		out.Auth = &a2a.PushAuthInfo{Scheme: c.GetAuthScheme(), Credentials: c.GetAuthCredentials()}
	}
	return out
}

// CreateTaskPushConfig registers a webhook for one of the sender's tasks.
func (h *handler) CreateTaskPushConfig(ctx context.Context, req *a2a.PushConfig) (*a2a.PushConfig, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if vs := checkPushConfig(req, true); vs != nil {
		return nil, h.g.reject(ctx, vs)
	}
	if _, err := h.current(ctx, "CreateTaskPushNotificationConfig", agent, req.TaskID); err != nil {
		return nil, err
	}
	return h.createPush(ctx, req)
}

func (h *handler) createPush(ctx context.Context, pc *a2a.PushConfig) (*a2a.PushConfig, error) {
	r := &inboundv1.CreatePushConfigRequest{TaskId: string(pc.TaskID), ConfigId: pc.ID, Url: pc.URL, Token: pc.Token}
	if pc.Auth != nil {
		r.AuthScheme, r.AuthCredentials = pc.Auth.Scheme, pc.Auth.Credentials
	}
	res, err := h.g.inbound.CreatePushConfig(as(ctx, 0), r)
	if err != nil {
		return nil, h.fault(ctx, "CreateTaskPushNotificationConfig", err)
	}
	return pushConfig(res.GetConfig()), nil
}

// GetTaskPushConfig shows one webhook of one of the sender's tasks.
func (h *handler) GetTaskPushConfig(ctx context.Context, req *a2a.GetTaskPushConfigRequest) (*a2a.PushConfig, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if req.ID == "" {
		return nil, h.g.reject(ctx, []boundary.Violation{{Field: "id", Rule: "required", Message: "value is required"}})
	}
	if _, err := h.current(ctx, "GetTaskPushNotificationConfig", agent, req.TaskID); err != nil {
		return nil, err
	}
	res, err := h.g.inbound.GetPushConfig(as(ctx, 0), &inboundv1.GetPushConfigRequest{TaskId: string(req.TaskID), ConfigId: req.ID})
	if err != nil {
		return nil, h.notFoundConfig(ctx, "GetTaskPushNotificationConfig", req.ID, err)
	}
	return pushConfig(res.GetConfig()), nil
}

// notFoundConfig says a config is not there in words of its own (A2A has
// no error for it but TaskNotFound).
func (h *handler) notFoundConfig(ctx context.Context, method, id string, err error) error {
	e := h.fault(ctx, method, err)
	if errorIs(e, a2a.ErrTaskNotFound) {
		return a2a.NewError(a2a.ErrTaskNotFound, fmt.Sprintf("Push notification config %q not found", id))
	}
	return e
}

// ListTaskPushConfigs lists the webhooks of one of the sender's tasks.
func (h *handler) ListTaskPushConfigs(ctx context.Context, req *a2a.ListTaskPushConfigRequest) (*a2a.ListTaskPushConfigResponse, error) {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return nil, err
	}
	if _, err := h.current(ctx, "ListTaskPushNotificationConfigs", agent, req.TaskID); err != nil {
		return nil, err
	}
	res, err := h.g.inbound.ListPushConfigs(as(ctx, 0), &inboundv1.ListPushConfigsRequest{TaskId: string(req.TaskID)})
	if err != nil {
		return nil, h.fault(ctx, "ListTaskPushNotificationConfigs", err)
	}
	out := &a2a.ListTaskPushConfigResponse{Configs: []*a2a.PushConfig{}}
	for _, c := range res.GetConfigs() {
		out.Configs = append(out.Configs, pushConfig(c))
	}
	return out, nil
}

// DeleteTaskPushConfig removes a webhook of one of the sender's tasks.
func (h *handler) DeleteTaskPushConfig(ctx context.Context, req *a2a.DeleteTaskPushConfigRequest) error {
	agent, err := h.target(ctx, req.Tenant)
	if err != nil {
		return err
	}
	if req.ID == "" {
		return h.g.reject(ctx, []boundary.Violation{{Field: "id", Rule: "required", Message: "value is required"}})
	}
	if _, err := h.current(ctx, "DeleteTaskPushNotificationConfig", agent, req.TaskID); err != nil {
		return err
	}
	if _, err := h.g.inbound.DeletePushConfig(as(ctx, 0), &inboundv1.DeletePushConfigRequest{TaskId: string(req.TaskID), ConfigId: req.ID}); err != nil {
		return h.fault(ctx, "DeleteTaskPushNotificationConfig", err)
	}
	return nil
}
