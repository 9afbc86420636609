package console

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
)

// invocation is a message an agent sent to a remote A2A agent, as the
// remoteagents tools return it.
type invocation struct {
	InvocationID string `json:"invocation_id"`
	AgentID      string `json:"agent_id"`
	URL          string `json:"url"`
	Message      string `json:"message"`
	Status       string `json:"status"`
	Answer       string `json:"answer"`
	Error        string `json:"error"`
	RemoteState  string `json:"remote_state"`
	Progress     string `json:"progress"`
	WorkflowID   string `json:"workflow_id"`
	CreateTime   string `json:"create_time"`
	ResolveTime  string `json:"resolve_time"`

	TemporalURL string `json:"-"`
}

// StatusWord is the invocation's status in words ("input required").
func (i invocation) StatusWord() string { return statusWord(i.Status, "INVOCATION_STATUS_") }

// Class names the colour of the invocation's status.
func (i invocation) Class() string { return "inv-" + strings.ReplaceAll(i.StatusWord(), " ", "-") }

// invocationStatuses are the statuses the invocations page filters by.
var invocationStatuses = []string{"INVOCATION_STATUS_WORKING", "INVOCATION_STATUS_COMPLETED", "INVOCATION_STATUS_FAILED",
	"INVOCATION_STATUS_CANCELLED", "INVOCATION_STATUS_REJECTED", "INVOCATION_STATUS_INPUT_REQUIRED"}

type invocationsView struct {
	Invocations []invocation
	// Agent and Status are the filters; Statuses what Status may be.
	Agent, Status      string
	Statuses           []string
	Total              int
	Offset, Prev, Next int
	// Query is the filters as a query string, for the pager.
	Query template.URL
	// Refused says why the edge refused the filters.
	Refused string
}

// invocations lists the agents' remote invocations (A2A), newest first,
// by agent and status.
func (c *Console) invocations(w http.ResponseWriter, r *http.Request, s *session) {
	offset := pageOffset(r)
	v := &invocationsView{Offset: offset, Prev: -1, Next: -1, Statuses: invocationStatuses,
		Agent: strings.TrimSpace(r.FormValue("agent")), Status: r.FormValue("status")}
	args := map[string]any{"offset": offset, "limit": c.cfg.PageSize}
	q := url.Values{}
	if v.Agent != "" {
		args["agent_id"] = v.Agent
		q.Set("agent", v.Agent)
	}
	for _, st := range invocationStatuses {
		if v.Status == st {
			args["status"] = st
			q.Set("status", st)
		}
	}
	v.Query = template.URL(q.Encode()) // encoded: only the filters' own values
	ctx, cancel := callCtx(r)
	defer cancel()
	env, err := c.edge.call(ctx, s.Person, "remoteagents_list_invocations", args)
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err == nil {
		var d struct {
			Invocations []invocation `json:"invocations"`
		}
		if err = json.Unmarshal(env.Data, &d); err == nil {
			v.Invocations, v.Total = d.Invocations, len(d.Invocations)
			for i := range v.Invocations {
				v.Invocations[i].TemporalURL = c.temporalURL(v.Invocations[i].WorkflowID)
			}
			if pg := env.Pagination; pg != nil {
				v.Total = pg.Total
				if pg.NextOffset != nil {
					v.Next = *pg.NextOffset
				}
			}
			if offset > 0 {
				v.Prev = max(0, offset-c.cfg.PageSize)
			}
		}
	}
	if te, ok := errors.AsType[*toolErr](err); ok && te.env.DomainCode == "invalid_argument" {
		v.Refused = te.env.Message
		c.renderStatus(w, r, s, http.StatusBadRequest, "invocations", "Remote invocations", v, nil)
		return
	}
	c.renderPage(w, r, s, "invocations", "Remote invocations", v, err)
}
