package toolcatalog_test

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// TestTheMeshsContractsDeclareWhatTheEdgeKnowsOfThem: the task kinds, the
// prompts and the tool calls are made on behalf of through are the
// contracts' options, and every tool they name is a tool of the mesh.
func TestTheMeshsContractsDeclareWhatTheEdgeKnowsOfThem(t *testing.T) {
	r := build(t, toolcatalog.Contracts()...)
	tasks := map[string]string{}
	var prompts []string
	for _, tool := range r.Tools() {
		if tool.Task != nil {
			tasks[tool.Name] = tool.Task.IDPrefix + ": " + tool.Task.Get.Name + ", " + tool.Task.Cancel.Name
		}
		for _, p := range tool.Prompts {
			prompts = append(prompts, p.GetName()+" through "+tool.Name)
			for arg, c := range p.Completions {
				if rt, ok := r.Lookup(c.Resource); !ok || rt.Resource == nil || rt.Resource.List == nil {
					t.Errorf("prompt %s completes %s from %q, which is not a resource template of the mesh", p.GetName(), arg, c.Resource)
				}
			}
		}
	}
	wantTasks := map[string]string{
		"owner_ask":           "ask: owner_get_ask, owner_cancel_ask",
		"remoteagents_invoke": "invoke: remoteagents_get_invocation, remoteagents_cancel_invocation",
		"workflows_run":       "workflow-run: workflows_get_run, workflows_cancel_run",
	}
	if !maps(tasks, wantTasks) {
		t.Errorf("task kinds = %v, want %v", tasks, wantTasks)
	}
	slices.Sort(prompts)
	if want := []string{"review_pending_asks through owner_list_asks", "review_schedule through schedules_get", "triage_tasks through tasks_list"}; !slices.Equal(prompts, want) {
		t.Errorf("prompts = %v, want %v", prompts, want)
	}
	if ob := r.OnBehalfOf(); ob == nil || ob.Tool.Name != "messages_get" || ob.Recipient.Name() != "to_agent" || ob.Depth.Name() != "depth" {
		t.Errorf("on behalf of = %+v, want messages_get's message, to_agent and depth", ob)
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestBadBlocksAreRefused: a task, prompt or on_behalf_of block the edge
// cannot serve stops the build, saying what to fix.
func TestBadBlocksAreRefused(t *testing.T) {
	const (
		startIn, startOut   = ".toolmesh.testing.v1.StartJobRequest", ".toolmesh.testing.v1.StartJobResponse"
		getIn, getOut       = ".toolmesh.testing.v1.GetJobRequest", ".toolmesh.testing.v1.GetJobResponse"
		cancelIn, cancelOut = ".toolmesh.testing.v1.CancelJobRequest", ".toolmesh.testing.v1.CancelJobResponse"
		echoIn, echoOut     = ".toolmesh.testing.v1.EchoRequest", ".toolmesh.testing.v1.EchoResponse"
	)
	jobsStart := testingv1.File_toolmesh_testing_v1_jobs_proto.Services().ByName("TestingJobsService").Methods().ByName("StartJob")
	goodTask := func() *toolv1.Task {
		opts := jobsStart.Options()
		return proto.Clone(proto.GetExtension(opts, toolv1.E_Tool).(*toolv1.Tool).GetTask()).(*toolv1.Task)
	}
	start := func(task *toolv1.Task) rpc {
		return rpc{name: "Start", in: startIn, out: startOut, tool: &toolv1.Tool{Name: "fake_start", Title: "Start", Kind: toolv1.Kind_KIND_WRITE, LongRunning: true, Task: task}}
	}
	get := rpc{name: "GetJob", in: getIn, out: getOut, tool: &toolv1.Tool{Name: "testing_get_job", Title: "Get", Kind: toolv1.Kind_KIND_READ}}
	cancel := rpc{name: "CancelJob", in: cancelIn, out: cancelOut, tool: &toolv1.Tool{Name: "testing_cancel_job", Title: "Cancel", Kind: toolv1.Kind_KIND_WRITE}}
	with := func(change func(*toolv1.Task)) *toolv1.Task {
		task := goodTask()
		change(task)
		return task
	}
	read := func(name string, b *toolv1.OnBehalfOf, prompts ...*toolv1.Prompt) *toolv1.Tool {
		return &toolv1.Tool{Name: name, Title: "Read", Kind: toolv1.Kind_KIND_READ, OnBehalfOf: b, Prompts: prompts}
	}
	behalf := &toolv1.OnBehalfOf{Noun: "job", IdField: "job_id", IdExample: "job_1", ItemField: "job", RecipientField: "name", DepthField: "attempts"}
	badDepth := &toolv1.OnBehalfOf{Noun: "job", IdField: "job_id", IdExample: "job_1", ItemField: "job", RecipientField: "name", DepthField: "status"}
	cases := []struct {
		name string
		rpcs []rpc
		want string
	}{
		{"a task of a tool that does not wait", []rpc{get, cancel,
			{name: "Start", in: startIn, out: startOut, tool: &toolv1.Tool{Name: "fake_start", Title: "Start", Kind: toolv1.Kind_KIND_WRITE, Task: goodTask()}}},
			`tool "fake_start": task: only a long_running tool with an optional int32 wait_seconds request field starts a task`},
		{"no get tool", []rpc{cancel, start(goodTask())}, `task: get_tool "testing_get_job" is not a READ tool of the same registry`},
		{"an id field the tools lack", []rpc{get, cancel, start(with(func(k *toolv1.Task) { k.IdField = "id" }))},
			`task: id_field "id" is not a string field of toolmesh.testing.v1.GetJobRequest`},
		{"an item field the start lacks", []rpc{get, cancel,
			{name: "Start", in: startIn, out: echoOut, tool: &toolv1.Tool{Name: "fake_start", Title: "Start", Kind: toolv1.Kind_KIND_WRITE, LongRunning: true, Task: goodTask()}}},
			`task: item_field "job" is not a message field of toolmesh.testing.v1.EchoResponse`},
		{"a status field that is no enum", []rpc{get, cancel, start(with(func(k *toolv1.Task) { k.StatusField = "name" }))},
			`task: status_field "name" is not a field of toolmesh.testing.v1.Job of the right type`},
		{"a status left unsaid", []rpc{get, cancel, start(with(func(k *toolv1.Task) { k.Statuses = k.Statuses[:3] }))},
			`task: status value JOB_STATUS_CANCELLED has no state`},
		{"a status that is none", []rpc{get, cancel, start(with(func(k *toolv1.Task) { k.Statuses[0].Value = "JOB_STATUS_PAUSED" }))},
			`task: status "JOB_STATUS_PAUSED" is not a value of toolmesh.testing.v1.JobStatus`},
		{"a message that is no template", []rpc{get, cancel, start(with(func(k *toolv1.Task) { k.Statuses[0].Message = "{{.name" }))},
			`task: status "JOB_STATUS_RUNNING": message:`},
		{"on behalf of twice", []rpc{
			{name: "GetJob", in: getIn, out: getOut, tool: read("fake_get", behalf)},
			{name: "Other", in: getIn, out: getOut, tool: read("fake_other", behalf)}},
			`on_behalf_of: "fake_get" reads the items calls are made on behalf of already; one tool may`},
		{"a depth that is no int32", []rpc{{name: "GetJob", in: getIn, out: getOut, tool: read("fake_get", badDepth)}},
			`on_behalf_of: depth_field "status" is not an int32 field of toolmesh.testing.v1.Job`},
		{"a prompt embedding what the tool does not serve", []rpc{{name: "GetJob", in: getIn, out: getOut,
			tool: read("fake_get", nil, &toolv1.Prompt{Name: "look_at_job", Title: "Look", Description: "Looks.", Embed: toolv1.PromptEmbed_PROMPT_EMBED_ONE, IdArgument: "job_id",
				Arguments: []*toolv1.PromptArgument{{Name: "job_id", Required: true}}})}},
			`prompt "look_at_job": embeds one resource, but "fake_get" serves no resource template`},
		{"a list prompt on a tool that lists nothing", []rpc{{name: "GetJob", in: getIn, out: getOut,
			tool: read("fake_get", nil, &toolv1.Prompt{Name: "look_at_job", Title: "Look", Description: "Looks.", Embed: toolv1.PromptEmbed_PROMPT_EMBED_LIST, Text: "{{if}}"})}},
			`prompt "look_at_job": embeds a list, but "fake_get" lists no resource template's items`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sd, d := service(t, c.rpcs...)
			_, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{sd}, d, toolcatalog.Options{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// The same tools with the good blocks build.
	sd, d := service(t, get, cancel, start(goodTask()))
	if _, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{sd}, d, toolcatalog.Options{}); err != nil {
		t.Errorf("Build with good blocks: %v", err)
	}
}
