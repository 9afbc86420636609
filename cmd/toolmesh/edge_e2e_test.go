package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/agentcheck"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	"github.com/toolmesh/toolmesh/services/agents"
	"github.com/toolmesh/toolmesh/services/agents/agentsstore"
	"github.com/toolmesh/toolmesh/services/messages"
	"github.com/toolmesh/toolmesh/services/messages/messagesstore"
)

// startMesh serves the agents and messages services (messages checking its
// callers against agents, with "local" seeded as under `toolmesh up`), and
// returns a function that starts an edge in front of them whose callers act
// as the given agent and opens an MCP client session to it.
func startMesh(t *testing.T) (sessionAs func(agent string) *mcp.ClientSession) {
	t.Helper()
	agentsSrv, checked := startDirectory(t)
	mst, err := messagesstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "messages.db")))
	if err != nil {
		t.Fatal(err)
	}
	messagesSrv := checked(messages.New(mst, messages.Config{}).Registration())

	// Closed before the services stop, so they need not wait for idle
	// connections on shutdown.
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)

	return func(agent string) *mcp.ClientSession {
		t.Helper()
		_, s := connectEdge(t, edge.Config{
			Services: map[string]string{
				agentsv1connect.AgentsServiceName:     agentsSrv.URL,
				messagesv1connect.MessagesServiceName: messagesSrv.URL,
			},
			DevAgent:   agent,
			HTTPClient: edgeClient,
		})
		return s
	}
}

// connectEdge serves an edge configured by cfg and opens an MCP client
// session to it with the go-sdk client.
func connectEdge(t *testing.T, cfg edge.Config) (*edge.Edge, *mcp.ClientSession) {
	t.Helper()
	if cfg.Mesh == nil {
		cfg.Mesh = servertest.MeshSigner() // the key every test service accepts
	}
	e, err := edge.New(cfg, keptLog(t, "edge"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(e.Handler())
	t.Cleanup(hs.Close)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connect to the edge: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return e, s
}

// envelope is the part of the edge's result envelope the tests read.
type envelope struct {
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data"`
	DomainCode string          `json:"domain_code"`
	Message    string          `json:"message"`
	// Gap names what a capability_gap backend lacks.
	Gap string `json:"gap"`
	// RetryAfterSeconds is when a rate-limited call may be retried.
	RetryAfterSeconds int `json:"retry_after_seconds"`
	Pagination        *struct {
		Total      int  `json:"total"`
		Limit      int  `json:"limit"`
		NextOffset *int `json:"next_offset"`
	} `json:"pagination"`
	Violations []struct {
		Field string `json:"field"`
		Rule  string `json:"rule"`
	} `json:"violations"`
}

func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) envelope {
	t.Helper()
	return callToolMeta(t, s, name, args, nil)
}

// callToolMeta is callTool with the request's _meta.
func callToolMeta(t *testing.T, s *mcp.ClientSession, name string, args map[string]any, meta mcp.Meta) envelope {
	t.Helper()
	env, err := tryCallTool(s, &mcp.CallToolParams{Name: name, Arguments: args, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// tryCallTool is callTool that reports what went wrong instead of failing
// the test, for calls made from other goroutines.
func tryCallTool(s *mcp.ClientSession, params *mcp.CallToolParams) (envelope, error) {
	name := params.Name
	res, err := s.CallTool(context.Background(), params)
	if err != nil {
		return envelope{}, fmt.Errorf("tools/call %s: %v", name, err)
	}
	if len(res.Content) != 1 {
		return envelope{}, fmt.Errorf("tools/call %s: %d content items, want 1", name, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return envelope{}, fmt.Errorf("tools/call %s: content is %T, want text", name, res.Content[0])
	}
	if !json.Valid([]byte(text.Text)) {
		return envelope{}, fmt.Errorf("tools/call %s: text %q is not the envelope's JSON", name, text.Text)
	}
	// The data is read as a program reads it, from the structured content:
	// the text marks untrusted values for the model (internal/untrusted).
	structured, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return envelope{}, fmt.Errorf("tools/call %s: structuredContent: %v", name, err)
	}
	var env envelope
	if err := json.Unmarshal(structured, &env); err != nil {
		return envelope{}, fmt.Errorf("tools/call %s: envelope %s: %v", name, structured, err)
	}
	if res.IsError != (env.Status != "ok") {
		return env, fmt.Errorf("tools/call %s: isError %v with envelope status %q", name, res.IsError, env.Status)
	}
	return env, nil
}

func listTools(t *testing.T, s *mcp.ClientSession) map[string]*mcp.Tool {
	t.Helper()
	res, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	out := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		out[tool.Name] = tool
	}
	return out
}

func TestAgentsToolsThroughTheEdge(t *testing.T) {
	s := startMesh(t)("local")
	tools := listTools(t, s)
	for _, name := range []string{"agents_register", "agents_get", "agents_list", "agents_set_status"} {
		tool, ok := tools[name]
		if !ok {
			t.Errorf("tools/list lacks %s", name)
			continue
		}
		if tool.Description == "" {
			t.Errorf("%s has no description", name)
		}
	}
	if reg := tools["agents_register"]; reg != nil && (reg.Annotations == nil || reg.Annotations.DestructiveHint == nil || !*reg.Annotations.DestructiveHint) {
		t.Errorf("agents_register is ADMIN but not marked destructive: %+v", reg.Annotations)
	}
	if get := tools["agents_get"]; get != nil && (get.Annotations == nil || !get.Annotations.ReadOnlyHint) {
		t.Errorf("agents_get is READ but not marked read-only: %+v", get.Annotations)
	}

	env := callTool(t, s, "agents_list", map[string]any{})
	if env.Status != "ok" {
		t.Fatalf("agents_list: %+v", env)
	}
	var list struct {
		Agents []struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"agents"`
		Summary map[string]int `json:"summary"`
	}
	if err := json.Unmarshal(env.Data, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Agents) != 1 || list.Agents[0].ID != "local" || list.Agents[0].Status != "AGENT_STATUS_ACTIVE" {
		t.Errorf("agents_list agents = %+v, want the seeded local agent, active", list.Agents)
	}
	if list.Summary["active"] != 1 || list.Summary["total"] != 1 || list.Summary["paused"] != 0 {
		t.Errorf("agents_list summary = %v, want 1 active of 1", list.Summary)
	}
	if env.Pagination == nil || env.Pagination.Total != 1 || env.Pagination.Limit != 50 {
		t.Errorf("agents_list pagination = %+v, want total 1, limit 50", env.Pagination)
	}

	if env := callTool(t, s, "agents_get", map[string]any{"agent_id": "nobody"}); env.DomainCode != "not_found" || !strings.Contains(env.Message, "agent nobody is not registered") {
		t.Errorf("agents_get of an unknown agent = %+v, want not_found naming it", env)
	}
}

func TestMessagesToolsThroughTheEdge(t *testing.T) {
	sessionAs := startMesh(t)
	s := sessionAs("local")
	tools := listTools(t, s)
	for _, name := range []string{"messages_send", "messages_list"} {
		if _, ok := tools[name]; !ok {
			t.Errorf("tools/list lacks %s", name)
		}
	}

	type sent struct {
		Message struct {
			ID        string `json:"id"`
			ThreadID  string `json:"thread_id"`
			FromAgent string `json:"from_agent"`
		} `json:"message"`
		DuplicateSuppressed bool `json:"duplicate_suppressed"`
	}
	send := func() sent {
		env := callTool(t, s, "messages_send", map[string]any{"to_agent": "bob", "message": "build is green"})
		if env.Status != "ok" {
			t.Fatalf("messages_send: %+v", env)
		}
		var out sent
		if err := json.Unmarshal(env.Data, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := send()
	if first.Message.FromAgent != "local" || first.DuplicateSuppressed {
		t.Errorf("first send = %+v, want from local, not suppressed", first)
	}
	again := send()
	if !again.DuplicateSuppressed || again.Message.ID != first.Message.ID {
		t.Errorf("immediate resend = %+v, want duplicate_suppressed with the original message %s", again, first.Message.ID)
	}

	env := callTool(t, s, "messages_list", map[string]any{"thread_id": first.Message.ThreadID})
	if env.Status != "ok" || env.Pagination == nil || env.Pagination.Total != 1 || !strings.Contains(string(env.Data), first.Message.ID) {
		t.Errorf("messages_list of the thread = %+v (%s), want the one message", env, env.Data)
	}

	// An agent that is not registered is refused by the messages service.
	stranger := callTool(t, sessionAs("stranger"), "messages_send", map[string]any{"to_agent": "bob", "message": "hi"})
	if stranger.DomainCode != "permission_denied" || !strings.Contains(stranger.Message, "agent stranger is not registered") {
		t.Errorf("messages_send as an unregistered agent = %+v, want permission_denied naming it", stranger)
	}
	if env := callTool(t, s, "messages_send", map[string]any{"to_agent": "bob"}); env.DomainCode != "invalid_argument" {
		t.Errorf("messages_send without a message = %+v, want invalid_argument", env)
	}
}

// startDirectory serves the agents service with "local" seeded, as under
// `toolmesh up`, and returns it with a function that serves another domain
// checking its callers against that directory, as every domain does.
func startDirectory(t *testing.T) (agentsSrv *servertest.Server, checked func(server.Service) *servertest.Server) {
	t.Helper()
	ast, err := agentsstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "agents.db")))
	if err != nil {
		t.Fatal(err)
	}
	dir := agents.New(ast, agents.Config{})
	if err := dir.Seed(t.Context(), "local"); err != nil {
		t.Fatal(err)
	}
	agentsSrv = servertest.Start(t, dir.Registration())
	check := agentcheck.New(agentsSrv.URL, agentcheck.Options{HTTPClient: agentsSrv.Client()})
	return agentsSrv, func(svc server.Service) *servertest.Server {
		return servertest.StartWith(t, servertest.Options{Interceptors: []connect.Interceptor{check.Interceptor()}}, svc)
	}
}
