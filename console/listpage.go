package console

import (
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// listPage is what a filtered list page shows besides its rows: the
// filters (agent and status), the pager, and why the edge refused a
// filter.
type listPage struct {
	// Agent and Status are the filters; Statuses what Status may be.
	Agent, Status string
	Statuses      []string
	pager
	// Query is the filters as a query string, for the pager.
	Query template.URL
	// Refused says why the edge refused the filters.
	Refused string
}

// list calls the paged list tool with the request's filters (agent_id,
// and status when it is one of statuses) and its page, and decodes the
// tool's data into rows; count is how many rows were decoded (the total
// when the tool gives none).
func (c *Console) list(r *http.Request, s *session, tool string, statuses []string, rows any, count func() int) (listPage, error) {
	offset := pageOffset(r)
	p := listPage{pager: pageAt(offset), Statuses: statuses, Agent: strings.TrimSpace(r.FormValue("agent"))}
	if st := r.FormValue("status"); slices.Contains(statuses, st) {
		p.Status = st // another value filters nothing, and the page says so
	}
	args := map[string]any{"offset": offset, "limit": c.cfg.PageSize}
	q := url.Values{}
	if p.Agent != "" {
		args["agent_id"] = p.Agent
		q.Set("agent", p.Agent)
	}
	if p.Status != "" {
		args["status"] = p.Status
		q.Set("status", p.Status)
	}
	p.Query = template.URL(q.Encode()) // encoded: only the filters' own values
	ctx, cancel := callCtx(r)
	defer cancel()
	env, err := c.edge.call(ctx, s.Person, tool, args)
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err == nil {
		err = json.Unmarshal(env.Data, rows)
	}
	if err == nil {
		p.place(count(), c.cfg.PageSize, env.Pagination)
	}
	if te, ok := errors.AsType[*toolErr](err); ok && te.env.DomainCode == "invalid_argument" {
		p.Refused = te.env.Message
	}
	return p, err
}

// pager places one page of a paged list: its offset, the list's total,
// and the offsets of the pages before and after it (-1: none).
type pager struct {
	Total              int
	Offset, Prev, Next int
}

// pageAt is the pager of the page at offset before its list is read.
func pageAt(offset int) pager { return pager{Offset: offset, Prev: -1, Next: -1} }

// place sets the total and the neighbours once the list tool answered:
// count rows were decoded, size rows were asked for, and pg is the tool's
// pagination (nil when it gave none).
func (p *pager) place(count, size int, pg *pagination) {
	p.Total = count
	if pg != nil {
		p.Total = pg.Total
		if pg.NextOffset != nil {
			p.Next = *pg.NextOffset
		}
	}
	if p.Offset > 0 {
		p.Prev = max(0, p.Offset-size)
	}
}
