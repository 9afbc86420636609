package mcpdoor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// promptNames lists the prompts a session sees.
func promptNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListPrompts(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range res.Prompts {
		names = append(names, p.Name)
	}
	return names
}

// embeddedURIs are the URIs of the resources a prompt embeds, each checked
// to hold what reading it shows.
func embeddedURIs(t *testing.T, cs *mcp.ClientSession, res *mcp.GetPromptResult) []string {
	t.Helper()
	var uris []string
	for _, m := range res.Messages {
		er, ok := m.Content.(*mcp.EmbeddedResource)
		if !ok {
			continue
		}
		uris = append(uris, er.Resource.URI)
		read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: er.Resource.URI})
		if err != nil || !edgetest.JsonEqual(read.Contents[0].Text, er.Resource.Text) {
			t.Errorf("embedded %s holds %s; reading it gives %v (%v)", er.Resource.URI, er.Resource.Text, read, err)
		}
	}
	return uris
}

func TestPromptsReadTheMeshAsTheCaller(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartTasks(t)
	cs := edgetest.StartEdge(t, edgetest.TasksOnly(svc))
	ctx := context.Background()
	if got, want := promptNames(t, cs), []string{"review_pending_asks", "review_schedule", "triage_tasks"}; !slices.Equal(got, want) {
		t.Errorf("prompts/list = %v, want %v", got, want)
	}
	get := func(name string, args map[string]string) (*mcp.GetPromptResult, error) {
		return cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
	}

	empty, err := get("triage_tasks", nil)
	if err != nil || empty.Description != "No open tasks." || len(empty.Messages) != 1 {
		t.Fatalf("triage_tasks without tasks = %+v, %v", empty, err)
	}

	var ids []string
	for _, d := range []string{"pending work", "running work", "finished work"} {
		_, env := edgetest.Call(t, cs, "tasks_create", map[string]any{"description": d})
		var created struct {
			Task struct{ ID string } `json:"task"`
		}
		if err := json.Unmarshal(env.Data, &created); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, created.Task.ID)
	}
	edgetest.Call(t, cs, "tasks_update_status", map[string]any{"task_id": ids[1], "status": "TASK_STATUS_RUNNING"})
	edgetest.Call(t, cs, "tasks_cancel", map[string]any{"task_id": ids[2]})

	res, err := get("triage_tasks", map[string]string{"focus": "the release on Friday"})
	if err != nil {
		t.Fatal(err)
	}
	intro, ok := res.Messages[0].Content.(*mcp.TextContent)
	if !ok || !strings.Contains(intro.Text, "What matters most right now: the release on Friday.") || !strings.Contains(intro.Text, "tasks_update_status") {
		t.Errorf("triage_tasks instructions = %+v", res.Messages[0].Content)
	}
	if got := embeddedURIs(t, cs, res); !slices.Equal(got, []string{"toolmesh://tasks/" + ids[0], "toolmesh://tasks/" + ids[1]}) {
		t.Errorf("triage_tasks embeds %v, want the pending then the running task", got)
	}
	running, err := get("triage_tasks", map[string]string{"status": "running"})
	if err != nil || !slices.Equal(embeddedURIs(t, cs, running), []string{"toolmesh://tasks/" + ids[1]}) {
		t.Errorf("triage_tasks status=running = %+v, %v", running, err)
	}
	_, err = get("triage_tasks", map[string]string{"status": "finished"})
	if je, _ := rpcError(t, err); je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "pending or running") {
		t.Errorf("triage_tasks status=finished = %v, want invalid params", je)
	}
	_, err = get("review_schedule", nil)
	if je, _ := rpcError(t, err); je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "schedule_id") {
		t.Errorf("review_schedule without its argument = %v, want invalid params naming it", je)
	}
	// Without a schedules service, the prompt fails as schedules_get does.
	_, err = get("review_schedule", map[string]string{"schedule_id": "sch_00000000000000000000000000"})
	if _, env := rpcError(t, err); env.DomainCode != "not_supported" || env.Tool != "schedules_get" {
		t.Errorf("review_schedule with no schedules service = %+v, want schedules_get's not_supported", env)
	}

	complete := func(ref *mcp.CompleteReference, name, value string) []string {
		t.Helper()
		res, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: ref, Argument: mcp.CompleteParamsArgument{Name: name, Value: value}})
		if err != nil {
			t.Fatalf("complete %s %s: %v", ref.Name+ref.URI, name, err)
		}
		return res.Completion.Values
	}
	if got := complete(&mcp.CompleteReference{Type: "ref/prompt", Name: "triage_tasks"}, "status", "r"); !slices.Equal(got, []string{"running"}) {
		t.Errorf("completing status r = %v", got)
	}
	if got := complete(&mcp.CompleteReference{Type: "ref/prompt", Name: "triage_tasks"}, "focus", ""); len(got) != 0 {
		t.Errorf("completing the free-text focus = %v, want nothing", got)
	}
	got := complete(&mcp.CompleteReference{Type: "ref/resource", URI: "toolmesh://tasks/{task_id}"}, "task_id", "TSK_")
	slices.Sort(got)
	want := slices.Clone(ids)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("completing task ids = %v, want %v", got, want)
	}
	if _, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "nope"}, Argument: mcp.CompleteParamsArgument{Name: "x"}}); err == nil {
		t.Error("completing an argument of an unknown prompt succeeded")
	}
}

func TestPromptsAtEveryVersion(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartTasks(t)
	url := edgetest.ServeEdgeB(t, edgetest.TasksOnly(svc))
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "edge-test", Version: "1"}, nil)
			cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			if caps := cs.InitializeResult().Capabilities; caps.Prompts == nil || caps.Completions == nil || caps.Resources == nil {
				t.Errorf("capabilities = %+v, want prompts, resources and completions", caps)
			}
			res, err := cs.ListPrompts(context.Background(), nil)
			if err != nil || len(res.Prompts) != 3 {
				t.Fatalf("prompts/list = %+v, %v", res, err)
			}
			if v >= edge.ModernProtocol && (res.TTLMs == 0 || res.CacheScope != "public") {
				t.Errorf("prompts/list caching = %d %q, want the list TTL, public in development mode", res.TTLMs, res.CacheScope)
			}
			if _, err := cs.GetPrompt(context.Background(), &mcp.GetPromptParams{Name: "triage_tasks"}); err != nil {
				t.Errorf("prompts/get: %v", err)
			}
		})
	}
}
