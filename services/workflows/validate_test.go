package workflows_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/boundary"
	workflowsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflows/v1"
	"github.com/toolmesh/toolmesh/services/workflows"
)

// example is the documented example workflow (docs/agent-workflows.md).
func example(t *testing.T) *workflowsv1.CreateRequest {
	t.Helper()
	b, err := os.ReadFile("../../docs/examples/triage-workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	var req workflowsv1.CreateRequest
	if err := protojson.Unmarshal(b, &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

// graph builds a definition from compact JSON nodes.
func graph(t *testing.T, nodes string) *workflowsv1.Definition {
	t.Helper()
	var def workflowsv1.Definition
	if err := protojson.Unmarshal([]byte(`{"nodes":[`+nodes+`]}`), &def); err != nil {
		t.Fatalf("graph %s: %v", nodes, err)
	}
	return &def
}

// The smallest parts of graphs.
const (
	startAt = `{"id":"start","start":{"next":"a"}}`
	end     = `{"id":"done","end":{}}`
)

func action(id, tool, args, next string) string {
	return `{"id":"` + id + `","action":{"tool":"` + tool + `","arguments":` + args + `,"next":"` + next + `"}}`
}

func TestTheExampleIsAValidDefinition(t *testing.T) {
	e := start(t, workflows.Config{})
	if _, err := e.c.Create(agentA(), example(t)); err != nil {
		t.Fatalf("the documented example is refused: %v", err)
	}
}

func TestDefinitionsAreCheckedNodeByNode(t *testing.T) {
	e := start(t, workflows.Config{MaxNodes: 8, MaxParallel: 2})
	note := func(id, next string) string { return action(id, "memory_save", `{"key":"k","content":"c"}`, next) }
	for _, tc := range []struct {
		name, nodes string
		field, says string
	}{
		{"unknown tool", startAt + `,` + action("a", "tasks_explode", `{}`, "done") + `,` + end,
			"definition.nodes.a.action.tool", `node "a": unknown tool "tasks_explode"`},
		{"admin tool", startAt + `,` + action("a", "credits_grant", `{}`, "done") + `,` + end,
			"definition.nodes.a.action.tool", "admin tools need a confirmation"},
		{"long-running tool", startAt + `,` + action("a", "owner_ask", `{"question":"?"}`, "done") + `,` + end,
			"definition.nodes.a.action.tool", "use an approval node"},
		{"arguments the tool refuses", startAt + `,` + action("a", "tasks_create", `{"description":"","priority":"TASK_PRIORITY_URGENT"}`, "done") + `,` + end,
			"definition.nodes.a.action.arguments.priority", "tasks_create"},
		{"an unknown argument", startAt + `,` + action("a", "tasks_create", `{"description":"x","colour":"red"}`, "done") + `,` + end,
			"definition.nodes.a.action.arguments.colour", "unknown field"},
		{"an unknown templated argument", startAt + `,` + action("a", "tasks_create", `{"description":"x","colour":"${input.c}"}`, "done") + `,` + end,
			"definition.nodes.a.action.arguments.colour", "unknown field"},
		{"a template that does not compile", startAt + `,` + action("a", "tasks_create", `{"description":"${input.}"}`, "done") + `,` + end,
			"definition.nodes.a.action.arguments.description", "Syntax error"},
		{"a cycle", startAt + `,` + note("a", "b") + `,` + note("b", "c") + `,` + `{"id":"c","condition":{"expression":"true","then":"a","else":"done"}}` + `,` + end,
			"definition.nodes.a", "on a cycle: a → b → c → a"},
		{"an unreachable node", startAt + `,` + note("a", "done") + `,` + note("orphan", "done") + `,` + end,
			"definition.nodes.orphan", "no path from the start node"},
		{"a join without a parallel", startAt + `,` + note("a", "j") + `,{"id":"j","join":{"next":"done"}},` + end,
			"definition.nodes.j", "no parallel node names this join"},
		{"a parallel whose join is no join", startAt + `,{"id":"a","parallel":{"branches":["b","c"],"join":"done"}},` + note("b", "done") + `,` + note("c", "done") + `,` + end,
			"definition.nodes.a.parallel.join", "is not a join node"},
		{"a branch that ends the run", startAt + `,{"id":"a","parallel":{"branches":["b","c"],"join":"j"}},` + note("b", "j") + `,` + note("c", "done") + `,{"id":"j","join":{"next":"done"}},` + end,
			"definition.nodes.a.parallel.branches", `reaches end node "done" before the join`},
		{"a node entered from outside a branch", startAt + `,{"id":"a","condition":{"expression":"true","then":"p","else":"c"}},{"id":"p","parallel":{"branches":["b","c"],"join":"j"}},` +
			note("b", "j") + `,` + note("c", "j") + `,{"id":"j","join":{"next":"done"}},` + end,
			"definition.nodes.a", `leads into a branch of parallel node "p"`},
		{"too wide", startAt + `,{"id":"a","parallel":{"branches":["b","c","d"],"join":"j"}},` + note("b", "j") + `,` + note("c", "j") + `,` + note("d", "j") + `,{"id":"j","join":{"next":"done"}},` + end,
			"definition.nodes.a.parallel.branches", "at most 2 run in parallel"},
		{"too many nodes", startAt + `,` + note("a", "b") + `,` + note("b", "c") + `,` + note("c", "d") + `,` + note("d", "e") + `,` + note("e", "f") + `,` + note("f", "g") + `,` + note("g", "done") + `,` + end,
			"definition.nodes", "at most 8"},
		{"a condition that does not compile", startAt + `,{"id":"a","condition":{"expression":"input.x >","then":"done","else":"done"}},` + end,
			"definition.nodes.a.condition.expression", "does not compile"},
		{"an expression reading a node that runs later", startAt + `,{"id":"a","condition":{"expression":"nodes.b.output.ok","then":"b","else":"done"}},` + note("b", "done") + `,` + end,
			"definition.nodes.a.condition.expression", "nodes.b, which never runs before it"},
		{"an expression reading no node", startAt + `,` + note("a", "done") + `,{"id":"done","end":{"output":"nodes.nope.output"}}`,
			"definition.nodes.done.end.output", "nodes.nope, which is not a node"},
		{"two starts", startAt + `,{"id":"s2","start":{"next":"a"}},` + note("a", "done") + `,` + end,
			"definition.nodes.s2", "a second start node"},
		{"a missing node", startAt + `,` + note("a", "nowhere") + `,` + end,
			"definition.nodes.a", `"nowhere", which is not a node`},
		{"no end", startAt + `,` + note("a", "a2") + `,` + note("a2", "a"),
			"definition.nodes", "no end node"},
		{"duplicate ids", startAt + `,` + note("a", "done") + `,` + note("a", "done") + `,` + end,
			"definition.nodes.a", "two nodes have this id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.c.Create(agentA(), &workflowsv1.CreateRequest{Name: "w", Definition: graph(t, tc.nodes)})
			if connect.CodeOf(err) != connect.CodeInvalidArgument {
				t.Fatalf("Create = %v, want invalid_argument", err)
			}
			ce, _ := err.(*connect.Error)
			found := false
			var got []string
			for _, v := range boundary.ViolationsFromError(ce) {
				got = append(got, v.Field+": "+v.Message)
				if v.Field == tc.field && strings.Contains(v.Message, tc.says) {
					found = true
				}
			}
			if !found {
				b, _ := json.MarshalIndent(got, "", "  ")
				t.Errorf("violations %s, want one at %s saying %q", b, tc.field, tc.says)
			}
		})
	}
}

func TestConstantArgumentsAreCheckedTemplatedOnesAtRunTime(t *testing.T) {
	e := start(t, workflows.Config{})
	// description is required: a template stands for it until the run.
	ok := graph(t, startAt+`,`+action("a", "tasks_create", `{"description":"${input.what}","priority":"TASK_PRIORITY_LOW"}`, "done")+`,`+end)
	if _, err := e.c.Create(agentA(), &workflowsv1.CreateRequest{Name: "w", Definition: ok}); err != nil {
		t.Errorf("a templated required argument is refused: %v", err)
	}
	missing := graph(t, startAt+`,`+action("a", "tasks_create", `{"priority":"TASK_PRIORITY_LOW"}`, "done")+`,`+end)
	if _, err := e.c.Create(agentA(), &workflowsv1.CreateRequest{Name: "w2", Definition: missing}); connect.CodeOf(err) != connect.CodeInvalidArgument ||
		!strings.Contains(err.Error(), "description") {
		t.Errorf("a missing required argument = %v, want invalid_argument naming it", err)
	}
}

// The docs show the example the tests run, as it is.
func TestTheDocsShowTheExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/agent-workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := os.ReadFile("../../docs/examples/triage-workflow.json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "```json\n"+string(ex)+"```") {
		t.Error("docs/agent-workflows.md does not show docs/examples/triage-workflow.json as it is; copy the file into its example block")
	}
}
