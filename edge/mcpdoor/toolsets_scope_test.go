package mcpdoor_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/requeststate"
	"github.com/toolmesh/toolmesh/internal/testsupport/replicatest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// What narrows a selection and what keeps it: a token's toolsets claim
// narrows whatever the client selects, grants narrow further; a 2025-era
// session keeps the selection it was opened with, on every replica; stdio
// has the edge's; resources and prompts follow the tools they read
// through.

// A caller whose token claims "tasks" and grants READ tools only, selecting
// tasks and messages, sees the READ tools of tasks; the claim's refusals
// say that it is the token that leaves a tool out.
func TestTokenClaimAndGrantsNarrowTheSelection(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	f := productEdge(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t) })
	token := func(claim string) string {
		c := iss.Valid(edgetest.ResourceFor(f.HTTP), "bob", "toolmesh:read")
		c.Toolsets = claim
		return iss.Sign(t, jose.ES256, c)
	}
	var readTasks []string
	for _, tool := range toolsetTools(t, f.Edge, "tasks") {
		if tl, _ := f.Edge.Registry().Lookup(tool); tl.Kind == toolv1.Kind_KIND_READ && !tl.Privileged {
			readTasks = append(readTasks, tool)
		}
	}
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			h := http.Header{"Authorization": {"Bearer " + token("tasks")}, edge.HeaderToolsets: {"tasks,messages"}}
			cs := mustDial(t, f.URL, v, h, nil)
			if got := sorted(toolNames(t, cs)); !slices.Equal(got, readTasks) {
				t.Errorf("tools/list = %v, want the READ tools of tasks %v", got, readTasks)
			}
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "messages_list", Arguments: map[string]any{}})
			if err == nil || !strings.Contains(err.Error(), `tool messages_list is outside the toolsets the caller's token allows ("tasks")`) {
				t.Errorf("messages_list, selected but not claimed: err = %v", err)
			}
			// Selected and claimed but not granted: the pipeline's refusal
			// (a step-up challenge first, which this client does not answer).
			if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "tasks_create", Arguments: map[string]any{"description": "x"}}); err == nil {
				t.Error("tasks_create without the write scope succeeded")
			}
		})
	}
	// A claim naming what the edge lacks refuses the caller rather than
	// narrowing it to nothing or to everything.
	res, body := edgetest.Post(t, f.URL, http.Header{"Authorization": {"Bearer " + token("taks")}},
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`)
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(body), `the token's toolsets claim: unknown toolset \"taks\"`) {
		t.Errorf("a token claiming an unknown toolset: %d %s, want 403 naming the claim", res.StatusCode, body)
	}
}

// switchHeaders are headers a test changes between a client's requests.
type switchHeaders struct {
	mu   sync.Mutex
	h    http.Header
	base http.RoundTripper
}

func (s *switchHeaders) set(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v == "" {
		s.h.Del(k)
		return
	}
	s.h.Set(k, v)
}

func (s *switchHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	r = r.Clone(r.Context())
	for k, v := range s.h {
		r.Header[k] = slices.Clone(v)
	}
	s.mu.Unlock()
	return s.base.RoundTrip(r)
}

// A session keeps the selection it was opened with: later requests need
// not repeat it, and one that selects something else is refused.
func TestASessionKeepsItsSelection(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	tasks := toolsetTools(t, f.Edge, "tasks")
	for _, v := range sessionVersions() {
		t.Run(v, func(t *testing.T) {
			hs := &switchHeaders{h: http.Header{edge.HeaderToolsets: {"tasks"}}, base: http.DefaultTransport}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "toolsets-test", Version: "1"}, nil).Connect(context.Background(),
				&mcp.StreamableClientTransport{Endpoint: f.URL, HTTPClient: &http.Client{Transport: hs}}, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			hs.set(edge.HeaderToolsets, "") // the header no longer comes: the session's selection holds
			if got := sorted(toolNames(t, cs)); !slices.Equal(got, tasks) {
				t.Errorf("tools/list without the header = %v, want the session's toolset tasks %v", got, tasks)
			}
			hs.set(edge.HeaderToolsets, "messages")
			_, err = cs.ListTools(context.Background(), nil)
			if err == nil || !strings.Contains(err.Error(), `this session was opened with the toolset selection "tasks" and keeps it; start a new session to select "messages"`) {
				t.Errorf("tools/list selecting another toolset mid-session: err = %v", err)
			}
		})
	}
}

// A session opened at /mcp/x/tasks through a load balancer keeps its
// selection whichever replica a request lands on: the replica holding the
// session answers, forwarded to as every request of the session is.
func TestASessionsSelectionHoldsAcrossReplicas(t *testing.T) {
	t.Parallel()
	backend := testingsvc.New()
	m := &edgetest.MrtrMesh{Backend: backend, Svc: servertest.Start(t, backend.Server())}
	var err error
	if m.Key, err = requeststate.GenerateKey(); err != nil {
		t.Fatal(err)
	}
	reps := startReplicas(t, m, func(c *edge.Config) { c.Contracts = toolcatalog.Contracts() }, "a", "b")
	rr := replicatest.New(t, reps.all[0].lb(), reps.all[1].lb())
	for _, v := range sessionVersions() {
		t.Run(v, func(t *testing.T) {
			cs, err := connectAt(t, rr.URL+edge.PathToolsets+"tasks", v, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			for _, replica := range []string{"a", "b"} {
				rr.TurnTo(t, cs, replica)
				names := toolNames(t, cs)
				if len(names) != 5 || !slices.Contains(names, "tasks_create") {
					t.Errorf("tools/list through %s = %v, want the 5 tools of tasks", replica, names)
				}
			}
		})
	}
}

// Over stdio the selection is the edge's (--toolsets).
func TestStdioServesTheEdgesSelection(t *testing.T) {
	t.Parallel()
	f := productEdge(t, func(c *edge.Config) { c.MCP.Toolsets = "memory,-memory_delete" })
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		err := f.Edge.ServeStdio(ctx, inR, outW)
		outW.Close()
		served <- err
	}()
	defer func() { cancel(); inW.Close(); <-served }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "desktop", Version: "1"}, nil).Connect(ctx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := slices.DeleteFunc(toolsetTools(t, f.Edge, "memory"), func(n string) bool { return n == "memory_delete" })
	if got := sorted(toolNames(t, cs)); !slices.Equal(got, want) {
		t.Errorf("tools/list over stdio with --toolsets memory,-memory_delete = %v, want %v", got, want)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "memory_delete", Arguments: map[string]any{"key": "k"}}); err == nil || !strings.Contains(err.Error(), "outside this connection's toolset selection") {
		t.Errorf("memory_delete over stdio: err = %v, want it refused as outside the selection", err)
	}
}

// Resources and prompts follow the selection: a client that selects
// memory sees neither the work task template nor the triage prompt, and
// reading, completing or getting them is refused saying why; one that
// selects tasks has them.
func TestResourcesAndPromptsFollowTheSelection(t *testing.T) {
	t.Parallel()
	f := productEdge(t, nil)
	for _, v := range edge.ProtocolVersions {
		t.Run(v, func(t *testing.T) {
			ctx := context.Background()
			mem := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"memory"}}, nil)
			tasks := mustDial(t, f.URL, v, http.Header{edge.HeaderToolsets: {"tasks"}}, nil)
			templates := func(cs *mcp.ClientSession) []string {
				res, err := cs.ListResourceTemplates(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, tm := range res.ResourceTemplates {
					out = append(out, tm.URITemplate)
				}
				return out
			}
			prompts := func(cs *mcp.ClientSession) []string {
				res, err := cs.ListPrompts(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, p := range res.Prompts {
					out = append(out, p.Name)
				}
				return out
			}
			if got := templates(tasks); !slices.Equal(got, []string{"toolmesh://tasks/{task_id}"}) {
				t.Errorf("templates selecting tasks = %v, want the work task template", got)
			}
			if got := prompts(tasks); !slices.Equal(got, []string{"triage_tasks"}) {
				t.Errorf("prompts selecting tasks = %v, want triage_tasks", got)
			}
			if got := templates(mem); !slices.Equal(got, []string{"toolmesh://memories/{key}"}) {
				t.Errorf("templates selecting memory = %v, want the memory template only", got)
			}
			if got := prompts(mem); len(got) != 0 {
				t.Errorf("prompts selecting memory = %v, want none", got)
			}
			_, err := mem.ReadResource(ctx, &mcp.ReadResourceParams{URI: "toolmesh://tasks/task_1"})
			if err == nil || !strings.Contains(err.Error(), `resource toolmesh://tasks/task_1 is outside this connection's toolset selection "memory": it belongs to toolset "tasks"`) {
				t.Errorf("reading a work task selecting memory: err = %v", err)
			}
			_, err = mem.GetPrompt(ctx, &mcp.GetPromptParams{Name: "triage_tasks"})
			if err == nil || !strings.Contains(err.Error(), `prompt triage_tasks is outside`) {
				t.Errorf("getting triage_tasks selecting memory: err = %v", err)
			}
			_, err = mem.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: "toolmesh://tasks/{task_id}"},
				Argument: mcp.CompleteParamsArgument{Name: "task_id", Value: "t"}})
			if err == nil || !strings.Contains(err.Error(), `is outside this connection's toolset selection`) {
				t.Errorf("completing a work task id selecting memory: err = %v", err)
			}
			// The same read selecting tasks reaches the tool (no service:
			// not_supported), so the refusal above was the selection's.
			_, err = tasks.ReadResource(ctx, &mcp.ReadResourceParams{URI: "toolmesh://tasks/task_1"})
			if je, env := rpcError(t, err); je == nil || env.DomainCode != "not_supported" {
				t.Errorf("reading a work task selecting tasks: err = %v, want the tool's not_supported", err)
			}
		})
	}
}
