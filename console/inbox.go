package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// ask is an ask as the owner tools return it.
type ask struct {
	AskID      string   `json:"ask_id"`
	AgentID    string   `json:"agent_id"`
	Question   string   `json:"question"`
	Options    []string `json:"options"`
	Context    string   `json:"context"`
	Status     string   `json:"status"`
	Answer     string   `json:"answer"`
	AnsweredBy string   `json:"answered_by"`
	CreateTime string   `json:"create_time"`
	ExpireTime string   `json:"expire_time"`
	WorkflowID string   `json:"workflow_id"`
	// Run is the agent's workflow run the ask belongs to (an approval
	// node's ask), or "".
	Run string `json:"run"`
}

// inboxView is what the inbox page shows.
type inboxView struct {
	Asks []ask
	pager
	// Schedules wait for the owner's approval (the first page of them);
	// ScheduleTotal is how many do, SchedulesDown why they could not be read.
	Schedules     []schedule
	ScheduleTotal int
	SchedulesDown string
	// Answered is the ask answered just before (the flash after a redirect),
	// Decided the schedule approved or denied.
	Answered *ask
	Decided  *schedule
	// Failed holds, by ask id, why an answer was refused; Kept the answer
	// the person sent, shown again in its form.
	Failed, Kept map[string]string
	// Notice says something about the page as a whole (a renewed session).
	Notice string
}

// listPending reads one page of the pending asks of every agent as p.
func (c *Console) listPending(ctx context.Context, p person, offset, limit int) ([]ask, *pagination, error) {
	env, err := c.edge.call(ctx, p, "owner_list_asks", map[string]any{"status": "ASK_STATUS_PENDING", "offset": offset, "limit": limit})
	if err != nil {
		return nil, nil, err
	}
	if env.Status != "ok" {
		return nil, nil, toolError(env)
	}
	var d struct {
		Asks []ask `json:"asks"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return nil, nil, err
	}
	return d.Asks, env.Pagination, nil
}

// loadInbox fills v with the page at offset; an error says what is down.
func (c *Console) loadInbox(r *http.Request, s *session, offset int) (*inboxView, error) {
	ctx, cancel := callCtx(r)
	defer cancel()
	v := &inboxView{pager: pageAt(offset)}
	scheds, spg, serr := c.listPendingSchedules(ctx, s.Person, 0, c.cfg.PageSize)
	if serr != nil {
		v.SchedulesDown = c.outage(serr)
	} else {
		for i := range scheds {
			c.preview(ctx, s.Person, &scheds[i])
		}
		v.Schedules, v.ScheduleTotal = scheds, len(scheds)
		if spg != nil {
			v.ScheduleTotal = spg.Total
		}
	}
	asks, pg, err := c.listPending(ctx, s.Person, offset, c.cfg.PageSize)
	if err != nil {
		return v, err
	}
	v.Asks = asks
	v.place(len(asks), c.cfg.PageSize, pg)
	return v, nil
}

func pageOffset(r *http.Request) int {
	n, err := strconv.Atoi(r.FormValue("offset"))
	if err != nil || n < 0 || n > 1_000_000 {
		return 0
	}
	return n
}

// inbox is the owner's inbox: every pending ask, newest first, paged.
func (c *Console) inbox(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := c.loadInbox(r, s, pageOffset(r))
	if id := r.URL.Query().Get("answered"); id != "" && err == nil {
		ctx, cancel := callCtx(r)
		if env, err := c.edge.call(ctx, s.Person, "owner_get_ask", map[string]any{"ask_id": id}); err == nil && env.Status == "ok" {
			var d struct {
				Ask ask `json:"ask"`
			}
			if json.Unmarshal(env.Data, &d) == nil {
				v.Answered = &d.Ask
			}
		}
		cancel()
	}
	if id := r.URL.Query().Get("decided"); id != "" {
		ctx, cancel := callCtx(r)
		v.Decided = c.decidedSchedule(ctx, s.Person, id)
		cancel()
	}
	c.renderPage(w, r, s, "inbox", "Inbox", v, err)
}

// inboxList is the inbox's list alone, which the page's script fetches
// when the asks changed.
func (c *Console) inboxList(w http.ResponseWriter, r *http.Request, s *session) {
	v, err := c.loadInbox(r, s, pageOffset(r))
	c.renderFragment(w, r, s, "inbox", "live", v, err)
}

// answer sends the owner's answer to an ask through owner_answer.
func (c *Console) answer(w http.ResponseWriter, r *http.Request, s *session) {
	id, answer, offset := r.PathValue("id"), r.PostForm.Get("answer"), pageOffset(r)
	ctx, cancel := callCtx(r)
	env, err := c.edge.call(ctx, s.Person, "owner_answer", map[string]any{"ask_id": id, "answer": answer})
	cancel()
	if err == nil && env.Status == "ok" {
		c.log.InfoContext(r.Context(), "console.ask_answered", "ask_id", id, "subject", s.Person.Subject)
		http.Redirect(w, r, "/inbox?"+url.Values{"answered": {id}, "offset": {strconv.Itoa(offset)}}.Encode(), http.StatusSeeOther)
		return
	}
	v, lerr := c.loadInbox(r, s, offset)
	v.Kept = map[string]string{id: answer}
	status := http.StatusServiceUnavailable
	if err != nil {
		v.Failed = map[string]string{id: "Not sent: " + describe(err)}
	} else {
		status = httpStatus(env.DomainCode)
		v.Failed = map[string]string{id: env.Message}
	}
	if lerr == nil && !hasAsk(v.Asks, id) {
		v.Notice = "Your answer to " + id + " was refused: " + v.Failed[id]
	}
	c.renderStatus(w, r, s, status, "inbox", "Inbox", v, lerr)
}

// giveBack answers a form sent with an ended session: the person is
// signed in again and gets the page back with what they sent (the form
// at path, its fields kept), to send again.
func (c *Console) giveBack(w http.ResponseWriter, r *http.Request, s *session, path string, kept map[string]string) {
	if path == "/credits/grant" {
		v, err := c.loadCredits(r, s, "")
		v.Form = grantForm{Wallet: kept["wallet"], Amount: kept["amount"], Reference: kept["reference"], Note: kept["note"],
			Reason: kept["reason"], Confirm: kept["confirm"] == "true"}
		v.Failed = "Your session had ended, so nothing was granted. You are signed in again: check the grant below and send it again."
		c.renderStatus(w, r, s, http.StatusUnauthorized, "credits", "Credits", v, err)
		return
	}
	v, err := c.loadInbox(r, s, pageOffset(r))
	// /asks/{id}/answer or /schedules/{id}/{decision}
	if parts := strings.Split(strings.Trim(path, "/"), "/"); len(parts) == 3 {
		v.Kept = map[string]string{parts[1]: kept["answer"]}
		if x, ok := kept["reason"]; ok {
			v.Kept[parts[1]] = x
		}
	}
	v.Notice = "Your session had ended, so nothing was sent. You are signed in again: check your answer below and send it again."
	c.renderStatus(w, r, s, http.StatusUnauthorized, "inbox", "Inbox", v, err)
}

func hasAsk(asks []ask, id string) bool {
	for _, a := range asks {
		if a.AskID == id {
			return true
		}
	}
	return false
}

// toolErr is a tool's error envelope as an error.
type toolErr struct{ env envelope }

func (e *toolErr) Error() string { return e.env.Message }

func toolError(env envelope) error { return &toolErr{env} }

// formRefusal is the edge's refusal of an administrative call from a form,
// for the person who sent it: a confirmation or reason left out is named
// as the form names it (the edge's words are for a tool caller: "set
// confirm to true (the JSON boolean)"). The edge alone decides what is
// refused; confirm is the label of the form's confirmation box, reason
// what the form gave.
func formRefusal(env envelope, confirm, reason string) string {
	switch env.Violation {
	case "missing_confirm":
		if strings.TrimSpace(reason) == "" {
			return "Tick “" + confirm + "” and give a reason (it is recorded in the audit trail)."
		}
		return "Tick “" + confirm + "” to go ahead."
	case "missing_reason":
		return "Give a reason: it is recorded in the audit trail."
	}
	return env.Message
}

// describe says in a sentence what failed, for the page.
func describe(err error) string {
	if te, ok := errors.AsType[*toolErr](err); ok {
		return te.env.Message
	}
	if errors.Is(err, errEdgeUnreachable) {
		return "the edge does not answer."
	}
	return "an unexpected error."
}

// httpStatus is the HTTP status of a page showing a tool's error.
func httpStatus(code string) int {
	switch code {
	case "invalid_argument", "guardrail_violated":
		return http.StatusBadRequest
	case "unauthenticated":
		return http.StatusUnauthorized
	case "permission_denied", "read_only":
		return http.StatusForbidden
	case "not_found":
		return http.StatusNotFound
	case "conflict":
		return http.StatusConflict
	case "rate_limited":
		return http.StatusTooManyRequests
	case "unavailable", "deadline_exceeded":
		return http.StatusServiceUnavailable
	}
	return http.StatusBadGateway
}
