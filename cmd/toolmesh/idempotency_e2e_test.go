package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// startIdempotencyMesh serves agents, tasks, credits and audit, as under
// `toolmesh up`, with an edge in front, and opens an MCP session as the
// development principal (the local agent, holding every grant).
func startIdempotencyMesh(t *testing.T) *mcp.ClientSession {
	t.Helper()
	agentsSrv, checked := startDirectory(t)
	open := func(name string) string { return filepath.Join(t.TempDir(), name+".db") }
	tst, err := tasksstore.Open(t.Context(), sqldbtest.Open(t, open("tasks")))
	if err != nil {
		t.Fatal(err)
	}
	cst, err := creditsstore.Open(t.Context(), sqldbtest.Open(t, open("credits")))
	if err != nil {
		t.Fatal(err)
	}
	ast, err := auditstore.Open(t.Context(), sqldbtest.Open(t, open("audit")))
	if err != nil {
		t.Fatal(err)
	}
	tasksSrv := checked(tasks.New(tst, tasks.Config{}).Registration())
	creditsSrv := checked(credits.New(cst, credits.Config{}).Registration())
	auditSrv := checked(audit.New(ast, audit.Config{}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			agentsv1connect.AgentsServiceName:   agentsSrv.URL,
			tasksv1connect.TasksServiceName:     tasksSrv.URL,
			creditsv1connect.CreditsServiceName: creditsSrv.URL,
			auditv1connect.AuditServiceName:     auditSrv.URL,
		},
		HTTPClient: edgeClient,
	})
	return s
}

// callConcurrently makes n calls at once; args(i) and key(i) are the i-th
// call's arguments and idempotency key ("" for none).
func callConcurrently(t *testing.T, s *mcp.ClientSession, n int, tool string, args func(i int) map[string]any, key func(i int) string) []envelope {
	t.Helper()
	envs, errs := make([]envelope, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		params := &mcp.CallToolParams{Name: tool, Arguments: args(i)}
		if k := key(i); k != "" {
			params.Meta = mcp.Meta{edge.MetaIdempotencyKey: k}
		}
		wg.Go(func() { envs[i], errs[i] = tryCallTool(s, params) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return envs
}

func TestIdempotencyKeyThroughTheEdge(t *testing.T) {
	s := startIdempotencyMesh(t)
	describe := func(i int) map[string]any { return map[string]any{"description": fmt.Sprintf("attempt %d", i)} }
	sameKey := func(int) string { return "create-1" }
	type created struct {
		Task struct {
			ID          string `json:"id"`
			Description string `json:"description"`
		} `json:"task"`
	}

	// Twenty concurrent calls with one key and twenty different requests:
	// one is carried out, the others are conflicts naming the key.
	var first created
	ok := 0
	for i, env := range callConcurrently(t, s, 20, "tasks_create", describe, sameKey) {
		switch {
		case env.Status == "ok":
			ok++
			if err := json.Unmarshal(env.Data, &first); err != nil {
				t.Fatal(err)
			}
		case env.DomainCode != "conflict" || !strings.Contains(env.Message, "create-1"):
			t.Errorf("call %d = %+v, want ok or a conflict naming the key", i, env)
		}
	}
	if ok != 1 {
		t.Fatalf("%d of 20 calls with one key and different requests succeeded, want 1", ok)
	}

	// The same key with the same request, later: the first task.
	env, err := tryCallTool(s, &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": first.Task.Description},
		Meta: mcp.Meta{edge.MetaIdempotencyKey: "create-1"}})
	var again created
	if err != nil || env.Status != "ok" || json.Unmarshal(env.Data, &again) != nil || again.Task.ID != first.Task.ID {
		t.Errorf("a later call with the key and the first request = %+v, %v; want task %s", env, err, first.Task.ID)
	}
	list := callTool(t, s, "tasks_list", map[string]any{})
	if list.Status != "ok" || list.Pagination == nil || list.Pagination.Total != 1 {
		t.Errorf("tasks_list = %+v, want the one task", list)
	}
}

func TestAdminReplaysAreAuditedAsReplays(t *testing.T) {
	s := startIdempotencyMesh(t)
	grant := func(ref string) func(int) map[string]any {
		return func(i int) map[string]any {
			return map[string]any{"wallet": "local", "amount": 50, "reference": ref, "confirm": true, "reason": fmt.Sprintf("top-up, attempt %d", i)}
		}
	}
	// Twenty grants of one reference, each call with its own key (the
	// client gave none): one change, nineteen replays.
	entries := map[string]bool{}
	for i, env := range callConcurrently(t, s, 20, "credits_grant", grant("inv-1"), func(int) string { return "" }) {
		var out struct {
			Entry struct {
				ID string `json:"id"`
			} `json:"entry"`
		}
		if env.Status != "ok" || json.Unmarshal(env.Data, &out) != nil {
			t.Fatalf("grant %d = %+v, want ok", i, env)
		}
		entries[out.Entry.ID] = true
	}
	if len(entries) != 1 {
		t.Errorf("20 grants of one reference answered %d entries, want 1", len(entries))
	}
	// Five calls with one client key: one call, one record.
	for _, env := range callConcurrently(t, s, 5, "credits_grant", grant("inv-2"), func(int) string { return "grant-2" }) {
		if env.Status != "ok" {
			t.Fatalf("grant with key grant-2 = %+v, want ok", env)
		}
	}

	type record struct {
		Seq      string `json:"seq"`
		Tool     string `json:"tool"`
		Outcome  string `json:"outcome"`
		CallID   string `json:"call_id"`
		ReplayOf string `json:"replay_of"`
	}
	env := callTool(t, s, "audit_list", map[string]any{"limit": 100})
	var trail struct {
		Records []record `json:"records"`
	}
	if env.Status != "ok" || json.Unmarshal(env.Data, &trail) != nil {
		t.Fatalf("audit_list = %+v", env)
	}
	var changes []record
	replays := map[string]int{} // replay_of -> count
	for _, r := range trail.Records {
		switch r.Outcome {
		case "OUTCOME_SUCCEEDED":
			changes = append(changes, r)
		case "OUTCOME_REPLAYED":
			replays[r.ReplayOf]++
		default:
			t.Errorf("record %s has outcome %q", r.Seq, r.Outcome)
		}
	}
	if len(changes) != 2 || changes[0].CallID != "mcp-client-grant-2" {
		t.Fatalf("change records = %+v, want two: the grant of inv-1 and the call with key grant-2", changes)
	}
	if inv1 := changes[1].CallID; len(replays) != 1 || replays[inv1] != 19 {
		t.Errorf("replay records per call replayed = %v, want 19 replays of %s, the grant of inv-1", replays, inv1)
	}
	bal := callTool(t, s, "credits_balance", map[string]any{})
	if bal.Status != "ok" || !strings.Contains(string(bal.Data), `"balance":"100"`) {
		t.Errorf("credits_balance = %+v %s, want 100: each grant once", bal, bal.Data)
	}
	if v := callTool(t, s, "audit_verify", map[string]any{}); !strings.Contains(string(v.Data), `"intact":true`) {
		t.Errorf("audit_verify = %s, want an intact trail", v.Data)
	}
}
