package workflows

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/flowexpr"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
)

// maxArgumentsBytes bounds an action's arguments as JSON.
const maxArgumentsBytes = 16 << 10

// Callable reports whether an action node may call a tool and, if not, why.
// A run calls tools unattended, one call each, so:
//   - not ADMIN: each admin call needs its own confirmation and reason;
//   - not long-running: a node waits for one result, not a handle (ask the
//     owner with an approval node instead of owner_ask).
//
// Privileged tools may be called when the agent that starts the run holds
// the grant (checked when the run starts).
func Callable(t *toolcatalog.Tool) (bool, string) {
	switch {
	case t.Kind == toolv1.Kind_KIND_ADMIN:
		return false, "admin tools need a confirmation and a reason for every call"
	case t.LongRunning:
		return false, "long-running tools answer with a handle, not a result (to ask the owner, use an approval node)"
	}
	return true, ""
}

// graph is a definition's nodes and edges.
type graph struct {
	def   *workflowsv1.Definition
	nodes map[string]*workflowsv1.Node
	start string
	// succ are each node's successors, in the order its fields name them.
	succ map[string][]string
	// joinOf maps a join node to the parallel node that names it.
	joinOf map[string]string
}

// checker collects what is wrong with a definition, node by node.
type checker struct {
	s  *Service
	g  *graph
	vs []boundary.Violation
}

func (c *checker) fail(node, field, rule, format string, args ...any) {
	path := "definition.nodes"
	if node != "" {
		path += "." + node
		if field != "" {
			path += "." + field
		}
	}
	msg := fmt.Sprintf(format, args...)
	if node != "" {
		msg = fmt.Sprintf("node %q: %s", node, msg)
	}
	c.vs = append(c.vs, boundary.Violation{Field: path, Rule: "workflows." + rule, Message: msg})
}

// check checks a definition before it is stored: its shape (one start,
// known node ids, parallels and their joins), that it has no cycle and no
// unreachable node, that each branch of a parallel node stays inside it,
// and each node's content (tools and their arguments, expressions). The
// error is invalid_argument with a violation per problem, each naming its
// node.
func (s *Service) check(def *workflowsv1.Definition) error {
	c := &checker{s: s}
	if n := len(def.GetNodes()); n > s.cfg.MaxNodes {
		c.fail("", "", "max_nodes", "the workflow has %d nodes; at most %d", n, s.cfg.MaxNodes)
		return boundary.InvalidArgument(c.vs...)
	}
	c.g = c.shape(def)
	if len(c.vs) == 0 {
		c.acyclic()
	}
	if len(c.vs) == 0 {
		c.reachable()
	}
	if len(c.vs) == 0 {
		c.parallels()
	}
	if len(c.vs) == 0 {
		c.contents()
	}
	if len(c.vs) > 0 {
		return boundary.InvalidArgument(c.vs...)
	}
	return nil
}

// shape checks ids and references and builds the graph.
func (c *checker) shape(def *workflowsv1.Definition) *graph {
	g := &graph{def: def, nodes: map[string]*workflowsv1.Node{}, succ: map[string][]string{}, joinOf: map[string]string{}}
	var ends int
	for _, n := range def.GetNodes() {
		if _, dup := g.nodes[n.GetId()]; dup {
			c.fail(n.GetId(), "", "unique_id", "two nodes have this id")
			continue
		}
		g.nodes[n.GetId()] = n
		switch k := n.GetKind().(type) {
		case *workflowsv1.Node_Start:
			if g.start != "" {
				c.fail(n.GetId(), "", "one_start", "a second start node (the first is %q); a workflow has exactly one", g.start)
			}
			g.start = n.GetId()
			g.succ[n.GetId()] = []string{k.Start.GetNext()}
		case *workflowsv1.Node_End:
			ends++
		case *workflowsv1.Node_Action:
			g.succ[n.GetId()] = []string{k.Action.GetNext()}
		case *workflowsv1.Node_Condition:
			g.succ[n.GetId()] = []string{k.Condition.GetThen(), k.Condition.GetElse()}
		case *workflowsv1.Node_Parallel:
			g.succ[n.GetId()] = k.Parallel.GetBranches()
		case *workflowsv1.Node_Join:
			g.succ[n.GetId()] = []string{k.Join.GetNext()}
		case *workflowsv1.Node_Approval:
			g.succ[n.GetId()] = []string{k.Approval.GetNext()}
			if r := k.Approval.GetOnReject(); r != "" {
				g.succ[n.GetId()] = append(g.succ[n.GetId()], r)
			}
		case *workflowsv1.Node_Delay:
			g.succ[n.GetId()] = []string{k.Delay.GetNext()}
		}
	}
	if g.start == "" {
		c.fail("", "", "one_start", `the workflow has no start node: add one, e.g. {"id": "begin", "start": {"next": "<the first node's id>"}}`)
	}
	if ends == 0 {
		c.fail("", "", "end", `the workflow has no end node: add one, e.g. {"id": "done", "end": {}}`)
	}
	for _, n := range def.GetNodes() {
		for _, next := range g.succ[n.GetId()] {
			switch target, ok := g.nodes[next]; {
			case !ok:
				c.fail(n.GetId(), "", "reference", "it leads to %q, which is not a node of the workflow", next)
			case target.GetStart() != nil:
				c.fail(n.GetId(), "", "reference", "it leads to the start node %q; nothing may", next)
			}
		}
		p := n.GetParallel()
		if p == nil {
			continue
		}
		if w := len(p.GetBranches()); w > c.s.cfg.MaxParallel {
			c.fail(n.GetId(), "parallel.branches", "max_parallel", "%d branches; at most %d run in parallel", w, c.s.cfg.MaxParallel)
		}
		join, ok := g.nodes[p.GetJoin()]
		switch {
		case !ok:
			c.fail(n.GetId(), "parallel.join", "join", "its join %q is not a node of the workflow", p.GetJoin())
		case join.GetJoin() == nil:
			c.fail(n.GetId(), "parallel.join", "join", "its join %q is not a join node", p.GetJoin())
		case g.joinOf[p.GetJoin()] != "":
			c.fail(n.GetId(), "parallel.join", "join", "join %q already belongs to parallel node %q; each parallel node has a join of its own", p.GetJoin(), g.joinOf[p.GetJoin()])
		default:
			g.joinOf[p.GetJoin()] = n.GetId()
		}
		if slices.Contains(p.GetBranches(), p.GetJoin()) {
			c.fail(n.GetId(), "parallel.branches", "join", "a branch goes straight to its join %q; a branch needs at least one node", p.GetJoin())
		}
	}
	for _, n := range def.GetNodes() {
		if n.GetJoin() != nil && g.joinOf[n.GetId()] == "" {
			c.fail(n.GetId(), "", "join", "no parallel node names this join (set its parallel node's join to %q)", n.GetId())
		}
	}
	return g
}

// acyclic finds a cycle, and names its nodes.
func (c *checker) acyclic() {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(id string) bool
	visit = func(id string) bool {
		state[id] = onPath
		path = append(path, id)
		for _, next := range c.g.succ[id] {
			switch state[next] {
			case onPath:
				cycle := append(slices.Clone(path[slices.Index(path, next):]), next)
				c.fail(next, "", "cycle", "it is on a cycle: %s; a workflow may not loop", strings.Join(cycle, " → "))
				return false
			case unseen:
				if !visit(next) {
					return false
				}
			}
		}
		path = path[:len(path)-1]
		state[id] = done
		return true
	}
	for _, n := range c.g.def.GetNodes() {
		if state[n.GetId()] == unseen && !visit(n.GetId()) {
			return
		}
	}
}

// reachable finds the nodes no path from the start reaches.
func (c *checker) reachable() {
	seen := c.g.from(c.g.start, "")
	for _, n := range c.g.def.GetNodes() {
		if !seen[n.GetId()] {
			c.fail(n.GetId(), "", "unreachable", "no path from the start node %q reaches it", c.g.start)
		}
	}
}

// from is every node reachable from id (id included), not going past stop.
func (g *graph) from(id, stop string) map[string]bool {
	seen := map[string]bool{}
	queue := []string{id}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		if n == stop {
			continue
		}
		queue = append(queue, g.succ[n]...)
	}
	return seen
}

// parallels checks that each parallel node's branches lead to its join and
// stay inside it: no branch reaches an end node or another parallel's join
// first, and no node of a branch is reached from outside the parallel.
func (c *checker) parallels() {
	for _, p := range c.g.def.GetNodes() {
		par := p.GetParallel()
		if par == nil {
			continue
		}
		inside := map[string]bool{}
		for _, b := range par.GetBranches() {
			for n := range c.g.from(b, par.GetJoin()) {
				inside[n] = true
			}
		}
		delete(inside, par.GetJoin())
		for _, n := range c.g.def.GetNodes() {
			id := n.GetId()
			if inside[id] {
				switch {
				case n.GetEnd() != nil:
					c.fail(p.GetId(), "parallel.branches", "branch", "a branch reaches end node %q before the join %q; every branch must lead to the join", id, par.GetJoin())
				case n.GetJoin() != nil && !inside[c.g.joinOf[id]]:
					c.fail(p.GetId(), "parallel.branches", "branch", "a branch reaches %q, the join of parallel node %q, before its own join %q", id, c.g.joinOf[id], par.GetJoin())
				}
				continue
			}
			if id == p.GetId() {
				continue
			}
			for _, next := range c.g.succ[id] {
				if inside[next] || next == par.GetJoin() {
					c.fail(id, "", "branch", "it leads into a branch of parallel node %q (to %q) from outside it; only the parallel node starts its branches", p.GetId(), next)
				}
			}
		}
	}
}

// contents checks what each node does: tools, arguments and expressions.
func (c *checker) contents() {
	before := c.g.ancestors()
	refs := func(id, field string, nodes []string) {
		for _, ref := range nodes {
			switch {
			case c.g.nodes[ref] == nil:
				c.fail(id, field, "expression", "it reads nodes.%s, which is not a node of the workflow", ref)
			case !before[id][ref]:
				c.fail(id, field, "expression", "it reads nodes.%s, which never runs before it", ref)
			}
		}
	}
	expr := func(id, field, src string) {
		x, err := c.s.expr.Compile(src)
		if err != nil {
			c.fail(id, field, "expression", "the expression does not compile: %v", err)
			return
		}
		refs(id, field, x.Nodes())
	}
	for _, n := range c.g.def.GetNodes() {
		id := n.GetId()
		switch k := n.GetKind().(type) {
		case *workflowsv1.Node_Action:
			c.action(id, k.Action, refs)
		case *workflowsv1.Node_Condition:
			expr(id, "condition.expression", k.Condition.GetExpression())
		case *workflowsv1.Node_End:
			if o := k.End.GetOutput(); o != "" {
				expr(id, "end.output", o)
			}
		case *workflowsv1.Node_Approval:
			t, err := c.s.expr.Template(k.Approval.GetQuestion())
			if err != nil {
				c.fail(id, "approval.question", "expression", "the question's template does not compile: %v", err)
				continue
			}
			refs(id, "approval.question", t.Nodes())
		}
	}
}

// action checks an action node's tool and arguments: the templates
// compile, and the constant arguments satisfy the tool's contract.
func (c *checker) action(id string, a *workflowsv1.ActionNode, refs func(id, field string, nodes []string)) {
	b, ok := c.s.tools[a.GetTool()]
	if !ok {
		c.fail(id, "action.tool", "tool", "unknown tool %q", a.GetTool())
		return
	}
	if ok, why := Callable(b.Tool()); !ok {
		c.fail(id, "action.tool", "tool", "%s cannot be called from a workflow: %s", a.GetTool(), why)
		return
	}
	raw, err := protojson.Marshal(a.GetArguments())
	if err != nil || len(raw) > maxArgumentsBytes {
		c.fail(id, "action.arguments", "arguments", "the arguments are %d bytes as JSON; at most %d", len(raw), maxArgumentsBytes)
		return
	}
	val, err := c.s.expr.Value(a.GetArguments().AsMap())
	if err != nil {
		field := "action.arguments"
		if pe, ok := err.(*flowexpr.PathError); ok {
			field += "." + pe.Path
			err = pe.Err
		}
		c.fail(id, field, "expression", "%v", err)
		return
	}
	refs(id, "action.arguments", val.Nodes())
	fields := b.Input().Fields()
	for _, k := range val.Templated() {
		if fields.ByName(protoreflect.Name(k)) == nil && fields.ByJSONName(k) == nil {
			c.fail(id, "action.arguments."+k, "arguments", "%s: unknown field %q", a.GetTool(), k)
		}
	}
	constant, err := json.Marshal(val.Constant())
	if err != nil {
		c.fail(id, "action.arguments", "arguments", "%v", err)
		return
	}
	templated := val.Templated()
	for _, v := range b.Violations(constant) {
		if slices.Contains(templated, toolcall.TopField(v.Field)) {
			continue // its value comes from a template: checked when the node runs
		}
		c.fail(id, strings.TrimSuffix("action.arguments."+v.Field, "."), "arguments", "%s: %s", a.GetTool(), v.Message)
	}
}

// ancestors maps each node to the nodes that may run before it (those
// with a path to it).
func (g *graph) ancestors() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for id := range g.nodes {
		out[id] = map[string]bool{}
	}
	for id := range g.nodes {
		for n := range g.from(id, "") {
			if n != id {
				out[n][id] = true
			}
		}
	}
	return out
}
