package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
	"github.com/toolmesh/toolmesh/internal/toolschema/schematest"
)

// The official MCP clients against the mesh `toolmesh up` runs, at every
// protocol version each speaks: the go-sdk client (2026-07-28 and the
// session era from 2025-03-26) and the TypeScript SDK client, run through
// Node (its newest version is 2025-11-25). Each lists and calls tools —
// every tool with a failing argument, its structured result checked against
// the tool's outputSchema —, lists and reads resources, lists and gets
// prompts, completes arguments, hears progress and, where its version has
// it, answers an elicitation. What each saw is logged.
func TestClientsAtEveryVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh and runs Node")
	}
	tsDir := nodetest.Install(t, filepath.Join("testdata", "tsclient"))
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	endpoint := m.Link(t, linkMCP)
	seed := seedMesh(t, endpoint)

	for _, v := range edge.ProtocolVersions {
		t.Run("go-sdk/"+v, func(t *testing.T) { runGoClient(t, endpoint, v, seed) })
	}
	for _, v := range []string{"2025-11-25", "2025-06-18", "2025-03-26"} {
		t.Run("typescript/"+v, func(t *testing.T) { runTSClient(t, tsDir, endpoint, v) })
	}
}

// seeded is what seedMesh created.
type seeded struct {
	pendingTask, runningTask, askID, scheduleID, projectID string
}

// seedMesh gives the mesh one of each resource: tasks, a memory, a pending
// ask, a schedule waiting for approval and a project (the directory the
// mesh runs in, its project base).
func seedMesh(t *testing.T, endpoint string) seeded {
	t.Helper()
	cs := connectAt(t, endpoint, "2025-11-25", nil)
	id := func(tool string, args map[string]any, field string) string {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || res.IsError {
			t.Fatalf("seed %s: %v %v", tool, err, res)
		}
		return dataField(t, res, field)
	}
	var s seeded
	s.pendingTask = id("tasks_create", map[string]any{"description": "Write the release notes", "priority": "TASK_PRIORITY_HIGH"}, "id")
	s.runningTask = id("tasks_create", map[string]any{"description": "Review the deploy checklist"}, "id")
	id("tasks_update_status", map[string]any{"task_id": s.runningTask, "status": "TASK_STATUS_RUNNING"}, "id")
	id("memory_save", map[string]any{"key": "project/roadmap", "content": "Ship resources and prompts in June."}, "key")
	s.askID = id("owner_ask", map[string]any{"question": "Ship on Friday?", "options": []string{"yes", "no"}, "wait_seconds": 0}, "ask_id")
	s.scheduleID = id("schedules_create", map[string]any{"interval_seconds": 3600, "description": "hourly check",
		"action": map[string]any{"tool": "tasks_create", "arguments": map[string]any{"description": "hourly check"}}}, "id")
	s.projectID = id("projects_create", map[string]any{"name": "toolmesh-cmd", "path": "."}, "id")
	return s
}

// connectAt opens a go-sdk client session at a protocol version.
func connectAt(t *testing.T, endpoint, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "clients-e2e", Version: "1"}, opts)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect at %s: %v", version, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func runGoClient(t *testing.T, endpoint, version string, seed seeded) {
	ctx := context.Background()
	var progress, elicited atomic.Int32
	var mu sync.Mutex
	var updated []string
	cs := connectAt(t, endpoint, version, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"confirm": true, "reason": "registered by the go-sdk client at " + version}}, nil
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			mu.Lock()
			updated = append(updated, r.Params.URI)
			mu.Unlock()
		},
	})
	if got := cs.InitializeResult().ProtocolVersion; got != version {
		t.Fatalf("negotiated %s, want %s", got, version)
	}

	// Tools, each result checked against its tool's outputSchema.
	schemas := map[string]*jsonschema.Resolved{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(tool.OutputSchema)
		schemas[tool.Name] = schematest.Compile(t, raw)
	}
	schemaErrors := 0
	callTool := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args, Meta: mcp.Meta{"progressToken": name}})
		if err != nil {
			t.Fatalf("tools/call %s: %v", name, err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if err := schematest.Check(schemas[name], raw); err != nil {
			schemaErrors++
			t.Errorf("%s: result does not validate against its outputSchema: %v\n%s", name, err, raw)
		}
		return res
	}
	errorResults := 0
	for name := range schemas {
		if callTool(name, map[string]any{"no_such_argument": true}).IsError {
			errorResults++
		}
	}
	if len(schemas) < 40 || errorResults != len(schemas) {
		t.Errorf("%d of %d tools answered a failing argument with an error result", errorResults, len(schemas))
	}
	for name, args := range map[string]map[string]any{
		"tasks_list": {}, "audit_head": {}, "memory_get": {"key": "project/roadmap"}, "owner_get_ask": {"ask_id": seed.askID},
		"schedules_get": {"schedule_id": seed.scheduleID}, "agents_list": {}, "credits_balance": {},
	} {
		if res := callTool(name, args); res.IsError {
			t.Errorf("%s = %v, want ok", name, res.StructuredContent)
		}
	}
	callTool("owner_ask", map[string]any{"question": "Progress check from the go-sdk client at " + version + "?", "wait_seconds": 3})
	register := callTool("agents_register", map[string]any{"agent_id": "go-" + strings.ReplaceAll(version, "-", "")})
	hasElicitation := version >= "2025-06-18"
	if hasElicitation != !register.IsError || hasElicitation != (elicited.Load() > 0) {
		t.Errorf("agents_register without confirm: isError %v after %d elicitations; want it elicited exactly when the version has elicitation", register.IsError, elicited.Load())
	}
	if progress.Load() == 0 {
		t.Error("no progress notification while owner_ask waited")
	}

	// Resources.
	var resources []*mcp.Resource
	for r, err := range cs.Resources(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		resources = append(resources, r)
	}
	var uris []string
	for _, r := range resources {
		uris = append(uris, r.URI)
	}
	for _, want := range []string{"toolmesh://tasks/" + seed.pendingTask, "toolmesh://asks/" + seed.askID, "toolmesh://memories/project%2Froadmap",
		"toolmesh://schedules/" + seed.scheduleID, "toolmesh://agents/local", "toolmesh://audit/head", "toolmesh://projects/" + seed.projectID} {
		if !slices.Contains(uris, want) {
			t.Errorf("resources/list lacks %s", want)
			continue
		}
		read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: want})
		if err != nil || len(read.Contents) != 1 || !json.Valid([]byte(read.Contents[0].Text)) {
			t.Errorf("resources/read %s = %v, %v", want, read, err)
		}
	}
	templates, err := cs.ListResourceTemplates(ctx, nil)
	if err != nil || len(templates.ResourceTemplates) != 7 {
		t.Errorf("resources/templates/list = %v, %v, want 7 templates", templates, err)
	}

	// Prompts and completion.
	complete := func(ref *mcp.CompleteReference, name, value string) []string {
		t.Helper()
		res, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: name, Value: value}})
		if err != nil {
			t.Fatalf("completion/complete %s: %v", name, err)
		}
		return res.Completion.Values
	}
	schedules := complete(&mcp.CompleteReference{Type: "ref/prompt", Name: "review_schedule"}, "schedule_id", "sch_")
	tasks := complete(&mcp.CompleteReference{Type: "ref/resource", URI: "toolmesh://tasks/{task_id}"}, "task_id", "tsk_")
	if !slices.Contains(schedules, seed.scheduleID) || !slices.Contains(tasks, seed.pendingTask) {
		t.Errorf("completions: schedules %v, tasks %v; want the seeded ones", schedules, tasks)
	}
	prompts, err := cs.ListPrompts(ctx, nil)
	if err != nil || len(prompts.Prompts) != 3 {
		t.Fatalf("prompts/list = %v, %v", prompts, err)
	}
	promptMessages := map[string]int{}
	for name, args := range map[string]map[string]string{
		"triage_tasks": {}, "review_pending_asks": {}, "review_schedule": {"schedule_id": seed.scheduleID},
	} {
		got, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
		if err != nil || len(got.Messages) < 2 {
			t.Errorf("prompts/get %s = %v, %v, want instructions and what it read", name, got, err)
			continue
		}
		promptMessages[name] = len(got.Messages)
	}

	// Subscriptions (the session era): a task moving on is heard.
	if version < edge.ModernProtocol {
		task := dataField(t, callTool("tasks_create", map[string]any{"description": "watched by " + version}), "id")
		uri := "toolmesh://tasks/" + task
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
		callTool("tasks_update_status", map[string]any{"task_id": task, "status": "TASK_STATUS_RUNNING"})
		deadline := time.Now().Add(3 * edge.DefaultResourcePoll)
		for !slices.Contains(func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(updated) }(), uri) {
			if time.Now().After(deadline) {
				t.Fatalf("no notifications/resources/updated for %s after its status changed", uri)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	mu.Lock()
	t.Logf("go-sdk %s saw: %d tools, %d failing calls answered with error results, %d schema errors; %d resources, %d templates; "+
		"prompts %v; completion %d schedule ids, %d task ids; %d progress notifications; %d elicitations (agents_register isError %v); resources/updated %v",
		version, len(schemas), errorResults, schemaErrors, len(resources), len(templates.ResourceTemplates), promptMessages,
		len(schedules), len(tasks), progress.Load(), elicited.Load(), register.IsError, updated)
	mu.Unlock()
}

// dataField is a string field of the record in a result's data, e.g. the
// id of {"task":{"id":...}}.
func dataField(t *testing.T, res *mcp.CallToolResult, field string) string {
	t.Helper()
	raw, _ := json.Marshal(res.StructuredContent)
	var env struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	for _, v := range env.Data {
		var rec map[string]any
		if json.Unmarshal(v, &rec) == nil {
			if s, ok := rec[field].(string); ok {
				return s
			}
		}
	}
	t.Fatalf("no %s in %s", field, raw)
	return ""
}

// tsReport is what the TypeScript client saw (testdata/tsclient/client.mjs).
type tsReport struct {
	Version                    string              `json:"version"`
	Negotiated                 string              `json:"negotiated"`
	Tools                      int                 `json:"tools"`
	ValidatorRejectsBadResults bool                `json:"validatorRejectsBadResults"`
	FailingCalls               int                 `json:"failingCalls"`
	ErrorResults               int                 `json:"errorResults"`
	OKCalls                    int                 `json:"okCalls"`
	SchemaErrors               []string            `json:"schemaErrors"`
	Resources                  int                 `json:"resources"`
	ResourcePages              int                 `json:"resourcePages"`
	Templates                  []string            `json:"templates"`
	Reads                      []string            `json:"reads"`
	Prompts                    []string            `json:"prompts"`
	PromptMessages             map[string]int      `json:"promptMessages"`
	Completions                map[string][]string `json:"completions"`
	Progress                   int                 `json:"progress"`
	Elicitations               int                 `json:"elicitations"`
	ElicitedResult             string              `json:"elicitedResult"`
	Errors                     []string            `json:"errors"`
}

func runTSClient(t *testing.T, dir, endpoint, version string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "client.mjs", endpoint, version)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s", err, stderr.String())
	}
	var r tsReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report %q: %v\n%s", out, err, stderr.String())
	}
	t.Logf("TypeScript SDK %s saw: %+v", version, r)
	if r.Negotiated != version {
		t.Errorf("negotiated %q, want %s", r.Negotiated, version)
	}
	if !r.ValidatorRejectsBadResults {
		t.Error("the client's outputSchema validator accepts a result without data: it would not catch a bad result")
	}
	if len(r.SchemaErrors) > 0 {
		t.Errorf("client-side schema errors: %q", r.SchemaErrors)
	}
	if len(r.Errors) > 0 {
		t.Errorf("errors: %q", r.Errors)
	}
	if r.Tools < 40 || r.FailingCalls != r.Tools || r.ErrorResults < r.FailingCalls || r.OKCalls != 3 {
		t.Errorf("tools %d, failing calls %d, error results %d, ok calls %d; want every failing call answered with an error result", r.Tools, r.FailingCalls, r.ErrorResults, r.OKCalls)
	}
	if r.Resources < 7 || len(r.Templates) != 7 || len(r.Reads) != 7 {
		t.Errorf("resources %d, templates %v, reads %v; want each kind listed and read", r.Resources, r.Templates, r.Reads)
	}
	if len(r.Prompts) != 3 || len(r.PromptMessages) != 3 {
		t.Errorf("prompts %v, got %v; want all three", r.Prompts, r.PromptMessages)
	}
	if len(r.Completions["schedule_id"]) == 0 || len(r.Completions["task_id"]) == 0 || !slices.Equal(r.Completions["status"], []string{"running"}) {
		t.Errorf("completions %v", r.Completions)
	}
	if r.Progress == 0 {
		t.Error("no progress notification while owner_ask waited")
	}
	if hasElicitation := version >= "2025-06-18"; hasElicitation != (r.Elicitations == 1 && r.ElicitedResult == "ok") ||
		(!hasElicitation && r.ElicitedResult != "guardrail_violated") {
		t.Errorf("elicitations %d, agents_register %s; want it elicited exactly when the version has elicitation", r.Elicitations, r.ElicitedResult)
	}
}
