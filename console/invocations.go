package console

import (
	"net/http"
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
	listPage
	Invocations []invocation
}

// invocations lists the agents' remote invocations (A2A), newest first,
// by agent and status.
func (c *Console) invocations(w http.ResponseWriter, r *http.Request, s *session) {
	var d struct {
		Invocations []invocation `json:"invocations"`
	}
	p, err := c.list(r, s, "remoteagents_list_invocations", invocationStatuses, &d, func() int { return len(d.Invocations) })
	v := &invocationsView{listPage: p, Invocations: d.Invocations}
	for i := range v.Invocations {
		v.Invocations[i].TemporalURL = c.temporalURL(v.Invocations[i].WorkflowID)
	}
	if v.Refused != "" {
		c.renderStatus(w, r, s, http.StatusBadRequest, "invocations", "Remote invocations", v, nil)
		return
	}
	c.renderPage(w, r, s, "invocations", "Remote invocations", v, err)
}
