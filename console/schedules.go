package console

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// schedule is a schedule as the schedules tools return it.
type schedule struct {
	ID              string   `json:"id"`
	AgentID         string   `json:"agent_id"`
	Description     string   `json:"description"`
	Cron            string   `json:"cron"`
	IntervalSeconds int      `json:"interval_seconds"`
	Timezone        string   `json:"timezone"`
	Status          string   `json:"status"`
	NextRunTimes    []string `json:"next_run_times"`
	SpecHash        string   `json:"spec_hash"`
	CreateTime      string   `json:"create_time"`
	Revision        int      `json:"revision"`
	Action          struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"action"`
	Decision *struct {
		DecidedBy string `json:"decided_by"`
		Note      string `json:"note"`
	} `json:"decision"`

	// Summary and RunTimes are the schedules contract's preview of the
	// spec: the words and the next runs every surface shows.
	Summary  string   `json:"-"`
	RunTimes []string `json:"-"`
	// Args is the action's arguments, indented for reading.
	Args string `json:"-"`
}

// previewRuns is how many next runs an approval shows.
const previewRuns = 5

// listPendingSchedules reads one page of the schedules of every agent
// waiting for the owner's approval, each with its preview.
func (c *Console) listPendingSchedules(ctx context.Context, p person, offset, limit int) ([]schedule, *pagination, error) {
	env, err := c.edge.call(ctx, p, "schedules_list", map[string]any{"status": "SCHEDULE_STATUS_PENDING_APPROVAL", "all_agents": true, "offset": offset, "limit": limit})
	if err != nil {
		return nil, nil, err
	}
	if env.Status != "ok" {
		return nil, nil, toolError(env)
	}
	var d struct {
		Schedules []schedule `json:"schedules"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return nil, nil, err
	}
	return d.Schedules, env.Pagination, nil
}

// preview fills in what the schedules contract's preview says of s's
// spec; when it cannot, the schedule's own next run times stand.
func (c *Console) preview(ctx context.Context, p person, s *schedule) {
	if b, err := json.MarshalIndent(json.RawMessage(s.Action.Arguments), "", "  "); err == nil {
		s.Args = string(b)
	}
	args := map[string]any{"timezone": s.Timezone, "count": previewRuns}
	if s.Cron != "" {
		args["cron"] = s.Cron
	} else {
		args["interval_seconds"] = s.IntervalSeconds
	}
	s.RunTimes = s.NextRunTimes
	env, err := c.edge.call(ctx, p, "schedules_preview", args)
	if err != nil || env.Status != "ok" {
		return
	}
	var d struct {
		RunTimes []string `json:"run_times"`
		Summary  string   `json:"summary"`
	}
	if json.Unmarshal(env.Data, &d) == nil {
		s.Summary, s.RunTimes = d.Summary, d.RunTimes
	}
}

// decideSchedule approves or denies a schedule (schedules_approve,
// schedules_deny: ADMIN tools, so the pipeline wants the person's
// confirmation and reason, which the form carries as given).
func (c *Console) decideSchedule(w http.ResponseWriter, r *http.Request, s *session) {
	id, decision := r.PathValue("id"), r.PathValue("decision")
	tool := map[string]string{"approve": "schedules_approve", "deny": "schedules_deny"}[decision]
	if tool == "" {
		c.refuse(w, r, http.StatusNotFound, "No such decision.")
		return
	}
	args := map[string]any{"schedule_id": id, "reason": r.PostForm.Get("reason"), "confirm": r.PostForm.Get("confirm") == "true"}
	if decision == "approve" {
		args["spec_hash"] = r.PostForm.Get("spec_hash")
	}
	ctx, cancel := callCtx(r)
	env, err := c.edge.call(ctx, s.Person, tool, args)
	cancel()
	offset := pageOffset(r)
	if err == nil && env.Status == "ok" {
		c.log.InfoContext(r.Context(), "console.schedule_decided", "schedule_id", id, "decision", decision, "subject", s.Person.Subject)
		http.Redirect(w, r, "/inbox?"+url.Values{"decided": {id}, "offset": {strconv.Itoa(offset)}}.Encode(), http.StatusSeeOther)
		return
	}
	v, lerr := c.loadInbox(r, s, offset)
	v.Kept = map[string]string{id: r.PostForm.Get("reason")}
	status := http.StatusServiceUnavailable
	if err != nil {
		v.Failed = map[string]string{id: "Not sent: " + describe(err)}
	} else {
		status = httpStatus(env.DomainCode)
		v.Failed = map[string]string{id: formRefusal(env, "I confirm this decision", r.PostForm.Get("reason"))}
	}
	c.renderStatus(w, r, s, status, "inbox", "Inbox", v, lerr)
}

// decidedSchedule reads a schedule just decided, for the flash.
func (c *Console) decidedSchedule(ctx context.Context, p person, id string) *schedule {
	env, err := c.edge.call(ctx, p, "schedules_get", map[string]any{"schedule_id": id})
	if err != nil || env.Status != "ok" {
		return nil
	}
	var d struct {
		Schedule schedule `json:"schedule"`
	}
	if json.Unmarshal(env.Data, &d) != nil {
		return nil
	}
	return &d.Schedule
}
