package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// temporalNamespace is the Temporal namespace the mesh's workflows run in.
const temporalNamespace = "default"

// run is an agent workflow run as the workflows tools return it.
type run struct {
	RunID              string          `json:"run_id"`
	WorkflowID         string          `json:"workflow_id"`
	Version            int             `json:"version"`
	WorkflowName       string          `json:"workflow_name"`
	AgentID            string          `json:"agent_id"`
	Status             string          `json:"status"`
	Input              json.RawMessage `json:"input"`
	Output             json.RawMessage `json:"output"`
	Error              *runError       `json:"error"`
	Nodes              []nodeRun       `json:"nodes"`
	CreateTime         string          `json:"create_time"`
	UpdateTime         string          `json:"update_time"`
	EndTime            string          `json:"end_time"`
	Deadline           string          `json:"deadline"`
	TemporalWorkflowID string          `json:"temporal_workflow_id"`

	// TemporalURL shows the run's workflow in the Temporal UI ("" without
	// the UI's address).
	TemporalURL string `json:"-"`
}

// StatusWord is the run's status in words ("suspended").
func (r run) StatusWord() string { return statusWord(r.Status, "RUN_STATUS_") }

// Ended reports whether the run can no longer change.
func (r run) Ended() bool {
	switch r.Status {
	case "RUN_STATUS_COMPLETED", "RUN_STATUS_FAILED", "RUN_STATUS_CANCELLED":
		return true
	}
	return false
}

type runError struct {
	NodeID     string `json:"node_id"`
	DomainCode string `json:"domain_code"`
	Message    string `json:"message"`
}

// nodeRun is one node of a run.
type nodeRun struct {
	NodeID    string          `json:"node_id"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output"`
	Error     *runError       `json:"error"`
	StartTime string          `json:"start_time"`
	EndTime   string          `json:"end_time"`
	AskID     string          `json:"ask_id"`
}

// defNode is a node of a workflow's definition: exactly one kind is set.
type defNode struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Start *struct {
		Next string `json:"next"`
	} `json:"start"`
	End *struct {
		Output string `json:"output"`
	} `json:"end"`
	Action *struct {
		Tool string `json:"tool"`
		Next string `json:"next"`
	} `json:"action"`
	Condition *struct {
		Expression string `json:"expression"`
		Then       string `json:"then"`
		Else       string `json:"else"`
	} `json:"condition"`
	Parallel *struct {
		Branches []string `json:"branches"`
		Join     string   `json:"join"`
	} `json:"parallel"`
	Join *struct {
		Next string `json:"next"`
	} `json:"join"`
	Approval *struct {
		Question string `json:"question"`
		Next     string `json:"next"`
		OnReject string `json:"on_reject"`
	} `json:"approval"`
	Delay *struct {
		Seconds int    `json:"seconds"`
		Next    string `json:"next"`
	} `json:"delay"`
}

// link is an edge of the graph: to the node named, with a label for
// branches ("then", "rejected").
type link struct{ to, label string }

// kind says what the node does, and links where it leads.
func (n defNode) kind() (string, []link) {
	switch {
	case n.Start != nil:
		return "start", []link{{n.Start.Next, ""}}
	case n.End != nil:
		return "end", nil
	case n.Action != nil:
		return "calls " + n.Action.Tool, []link{{n.Action.Next, ""}}
	case n.Condition != nil:
		return "condition", []link{{n.Condition.Then, "then"}, {n.Condition.Else, "else"}}
	case n.Parallel != nil:
		var out []link
		for _, b := range n.Parallel.Branches {
			out = append(out, link{b, ""})
		}
		return "parallel", out
	case n.Join != nil:
		return "join", []link{{n.Join.Next, ""}}
	case n.Approval != nil:
		out := []link{{n.Approval.Next, "approved"}}
		if n.Approval.OnReject != "" {
			out = append(out, link{n.Approval.OnReject, "rejected"})
		}
		return "owner's approval", out
	case n.Delay != nil:
		return fmt.Sprintf("waits %d s", n.Delay.Seconds), []link{{n.Delay.Next, ""}}
	}
	return "node", nil
}

// The graph's geometry, in SVG user units.
const (
	nodeW, nodeH = 160, 56
	colGap       = 56
	rowGap       = 24
	pad          = 12
)

// graph is a run's workflow drawn: each node placed in the column of its
// longest path from the start, and the links between them.
type graph struct {
	Width, Height int
	NodeW, NodeH  int
	Nodes         []graphNode
	Edges         []graphEdge
	// Summary says in words how many nodes are in each status.
	Summary string
}

type graphNode struct {
	ID, Title, Kind string
	// Status is the node's status in words; Class names its colour.
	Status, Class string
	X, Y          int
	// TX, TY1, TY2 place the node's id and status.
	TX, TY1, TY2  int
	Output, Error string
	AskID         string
	Start, End    string
}

type graphEdge struct {
	X1, Y1, X2, Y2 int
	Label          string
	LX, LY         int
}

// drawGraph lays out def with the nodes' states from r.
func drawGraph(def []defNode, r run) graph {
	byID := map[string]defNode{}
	for _, n := range def {
		byID[n.ID] = n
	}
	state := map[string]nodeRun{}
	for _, n := range r.Nodes {
		state[n.NodeID] = n
	}
	// Columns: the longest path from a node without predecessors (the
	// definition has no cycle; the guard bounds a broken one).
	col := map[string]int{}
	for _, n := range def {
		col[n.ID] = 0
	}
	for range def {
		changed := false
		for _, n := range def {
			_, links := n.kind()
			for _, l := range links {
				if _, ok := byID[l.to]; ok && col[l.to] < col[n.ID]+1 {
					col[l.to] = col[n.ID] + 1
					changed = true
				}
			}
		}
		if !changed {
			break
		}
	}
	g := graph{NodeW: nodeW, NodeH: nodeH}
	rows := map[int]int{}
	pos := map[string][2]int{}
	counts := map[string]int{}
	var order []string
	maxCol, maxRow := 0, 0
	for _, n := range def {
		c := col[n.ID]
		row := rows[c]
		rows[c]++
		x, y := pad+c*(nodeW+colGap), pad+row*(nodeH+rowGap)
		pos[n.ID] = [2]int{x, y}
		maxCol, maxRow = max(maxCol, c), max(maxRow, row)
		kind, _ := n.kind()
		st := state[n.ID]
		word := statusWord(st.Status, "NODE_STATUS_")
		if word == "" {
			word = "pending"
		}
		if counts[word] == 0 {
			order = append(order, word)
		}
		counts[word]++
		gn := graphNode{ID: n.ID, Title: n.Title, Kind: kind, Status: word, Class: "st-" + strings.ReplaceAll(word, " ", "-"),
			X: x, Y: y, TX: x + 10, TY1: y + 23, TY2: y + 44, Output: pretty(st.Output), AskID: st.AskID, Start: st.StartTime, End: st.EndTime}
		if st.Error != nil {
			gn.Error = st.Error.Message
		}
		g.Nodes = append(g.Nodes, gn)
	}
	for _, n := range def {
		_, links := n.kind()
		from := pos[n.ID]
		for _, l := range links {
			to, ok := pos[l.to]
			if !ok {
				continue
			}
			e := graphEdge{X1: from[0] + nodeW, Y1: from[1] + nodeH/2, X2: to[0], Y2: to[1] + nodeH/2, Label: l.label}
			e.LX, e.LY = (e.X1+e.X2)/2, (e.Y1+e.Y2)/2-8
			g.Edges = append(g.Edges, e)
		}
	}
	g.Width = 2*pad + (maxCol+1)*nodeW + maxCol*colGap
	g.Height = 2*pad + (maxRow+1)*nodeH + maxRow*rowGap
	parts := make([]string, 0, len(order))
	for _, w := range order {
		parts = append(parts, fmt.Sprintf("%d %s", counts[w], w))
	}
	g.Summary = fmt.Sprintf("%d nodes: %s.", len(def), strings.Join(parts, ", "))
	return g
}

// statusWord turns an enum value into words: NODE_STATUS_WAITING_APPROVAL
// is "waiting approval".
func statusWord(v, prefix string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(v, prefix)), "_", " ")
}

// pretty indents a JSON value for the page ("" for none).
func pretty(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return string(raw)
	}
	return string(b)
}

// temporalURL shows the workflow with id in the Temporal UI.
func (c *Console) temporalURL(id string) string {
	if c.cfg.TemporalUIURL == "" || id == "" {
		return ""
	}
	return strings.TrimSuffix(c.cfg.TemporalUIURL, "/") + "/namespaces/" + temporalNamespace + "/workflows?" +
		url.Values{"query": {`WorkflowId="` + id + `"`}}.Encode()
}

// runStatuses are the statuses the runs page filters by.
var runStatuses = []string{"RUN_STATUS_RUNNING", "RUN_STATUS_SUSPENDED", "RUN_STATUS_COMPLETED", "RUN_STATUS_FAILED", "RUN_STATUS_CANCELLED"}

type runsView struct {
	listPage
	Runs []run
}

// runs lists agent workflow runs, newest first, by agent and status.
func (c *Console) runs(w http.ResponseWriter, r *http.Request, s *session) {
	var d struct {
		Runs []run `json:"runs"`
	}
	p, err := c.list(r, s, "workflows_list_runs", runStatuses, &d, func() int { return len(d.Runs) })
	v := &runsView{listPage: p, Runs: d.Runs}
	for i := range v.Runs {
		v.Runs[i].TemporalURL = c.temporalURL(v.Runs[i].TemporalWorkflowID)
	}
	if v.Refused != "" {
		// A filter the tool refuses: the page says why; nothing is down.
		c.renderStatus(w, r, s, http.StatusBadRequest, "runs", "Runs", v, nil)
		return
	}
	c.renderPage(w, r, s, "runs", "Runs", v, err)
}

type runView struct {
	Run   run
	Graph graph
	// GraphDown says why the graph could not be drawn.
	GraphDown string
	// Cancelled is set after a cancel; Failed says why one was refused.
	Cancelled bool
	Failed    string
}

// loadRun reads run id and its workflow's definition at the run's
// version, and draws the graph.
func (c *Console) loadRun(ctx context.Context, p person, id string) (*runView, error) {
	env, err := c.edge.call(ctx, p, "workflows_get_run", map[string]any{"run_id": id})
	if err == nil && env.Status != "ok" {
		err = toolError(env)
	}
	if err != nil {
		return nil, err
	}
	var d struct {
		Run run `json:"run"`
	}
	if err := json.Unmarshal(env.Data, &d); err != nil {
		return nil, err
	}
	v := &runView{Run: d.Run}
	v.Run.TemporalURL = c.temporalURL(d.Run.TemporalWorkflowID)
	wenv, werr := c.edge.call(ctx, p, "workflows_get", map[string]any{"workflow_id": d.Run.WorkflowID, "version": d.Run.Version})
	if werr == nil && wenv.Status != "ok" {
		werr = toolError(wenv)
	}
	var wd struct {
		Workflow struct {
			Definition struct {
				Nodes []defNode `json:"nodes"`
			} `json:"definition"`
		} `json:"workflow"`
	}
	if werr == nil {
		werr = json.Unmarshal(wenv.Data, &wd)
	}
	if werr != nil {
		v.GraphDown = "The graph is not drawn: its workflow could not be read: " + describe(werr)
		return v, nil
	}
	v.Graph = drawGraph(wd.Workflow.Definition.Nodes, v.Run)
	return v, nil
}

// runPage shows one run: its graph, each node's output, cancel.
func (c *Console) runPage(w http.ResponseWriter, r *http.Request, s *session) {
	ctx, cancel := callCtx(r)
	defer cancel()
	v, err := c.loadRun(ctx, s.Person, r.PathValue("id"))
	if te, ok := errors.AsType[*toolErr](err); ok && (te.env.DomainCode == "not_found" || te.env.DomainCode == "invalid_argument") {
		c.refuse(w, r, httpStatus(te.env.DomainCode), te.env.Message)
		return
	}
	if v == nil {
		v = &runView{}
	}
	v.Cancelled = r.URL.Query().Get("cancelled") != ""
	c.renderPage(w, r, s, "run", "Run "+r.PathValue("id"), v, err)
}

// cancelRun cancels a run through workflows_cancel_run.
func (c *Console) cancelRun(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	ctx, cancel := callCtx(r)
	defer cancel()
	env, err := c.edge.call(ctx, s.Person, "workflows_cancel_run", map[string]any{"run_id": id})
	if err == nil && env.Status == "ok" {
		c.log.InfoContext(r.Context(), "console.run_cancelled", "run_id", id, "subject", s.Person.Subject)
		http.Redirect(w, r, "/runs/"+url.PathEscape(id)+"?cancelled=1", http.StatusSeeOther)
		return
	}
	status, why := http.StatusServiceUnavailable, "Not cancelled: "+describe(err)
	if err == nil {
		status, why = httpStatus(env.DomainCode), "Not cancelled: "+env.Message
	}
	v, lerr := c.loadRun(ctx, s.Person, id)
	if v == nil {
		c.refuse(w, r, status, why)
		return
	}
	v.Failed = why
	c.renderStatus(w, r, s, status, "run", "Run "+id, v, lerr)
}
