// Package benchmesh measures the mesh as its users meet it: it builds the
// binary, starts the processes `make run` starts (`toolmesh up`), and drives
// one read from separate load generator processes in three ways — the
// tasks_get tool through the edge, the same Get straight to the tasks
// service over Connect, and a stock go-sdk server doing the same lookup —
// reading each process's CPU time and resident memory from /proc.
package benchmesh

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
)

// Kinds of call a load generator makes.
const (
	// KindMCP posts a stateless (2026-07-28) tools/call tasks_get and reads
	// the SSE answer, as a plain HTTP client would.
	KindMCP = "mcp"
	// KindConnectJSON calls TasksService.Get with the Connect protocol and
	// the JSON codec (what curl or buf curl send).
	KindConnectJSON = "connect-json"
	// KindConnectProto calls TasksService.Get with the Connect protocol and
	// the binary codec (a generated client's default).
	KindConnectProto = "connect-proto"
	// KindMCPCapable posts the same tools/call tasks_get as KindMCP from a
	// client that declares what most MCP clients in use declare: it can
	// answer questions (form and URL elicitation, sampling, roots).
	KindMCPCapable = "mcp-capable"
	// KindMCPSession posts the same tools/call tasks_get within a session
	// of the 2025-11-25 protocol, the one most MCP clients speak today:
	// each caller initializes one (declaring roots and elicitation, as
	// such clients do) and sends its calls with its Mcp-Session-Id.
	KindMCPSession = "mcp-session"
	// KindMCPWrite posts a stateless tools/call memory_save, one of
	// WriteKeys keys in turn, as KindMCP posts its read.
	KindMCPWrite = "mcp-write"
	// KindConnectJSONWrite calls MemoryService.Save with the Connect
	// protocol and the JSON codec, the same keys.
	KindConnectJSONWrite = "connect-json-write"
	// KindMCPAdminWrite posts a stateless tools/call agents_set_status, an
	// administrative write, from a client that declares form elicitation
	// and leaves the confirmation out: the edge asks for it (an
	// input_required result) and the client answers in a second request
	// with the confirmation and a reason. A call is both requests.
	KindMCPAdminWrite = "mcp-admin-write"
	// KindConnectJSONAdminWrite calls AgentsService.SetStatus with the
	// Connect protocol and the JSON codec, the same changes.
	KindConnectJSONAdminWrite = "connect-json-admin-write"
)

// AdminAgents is how many agents the admin write kinds change the status
// of, each call pausing or resuming one that no other call is changing.
// They are AdminAgentID(0) to AdminAgentID(AdminAgents-1), registered and
// active before a phase starts.
const AdminAgents = 64

// AdminAgentID is the id of the i-th agent the admin write kinds change.
func AdminAgentID(i int) string { return fmt.Sprintf("bench-admin-%d", i) }

// AdminReason is the reason the admin write kinds give.
const AdminReason = "make bench-mesh"

// WriteKeys is how many memory keys the write kinds overwrite in turn: a
// write each call, a store that stays small.
const WriteKeys = 256

// ModernProtocol is the MCP protocol version of the tools/call requests.
const ModernProtocol = "2026-07-28"

// LoadConfig is one load generator run.
type LoadConfig struct {
	// Kind is KindMCP, KindConnectJSON or KindConnectProto.
	Kind string
	// URL is the MCP endpoint (KindMCP) or the service's base URL.
	URL string
	// TaskID is the task every call reads.
	TaskID string
	// Token is the mesh token of Connect calls (KindConnect*).
	Token string
	// Callers call concurrently, each waiting for its answer before it
	// sends the next call.
	Callers int
	// Duration is how long callers start new calls.
	Duration time.Duration
}

// LoadResult is what a load generator measured.
type LoadResult struct {
	Kind    string  `json:"kind"`
	Callers int     `json:"callers"`
	Calls   int     `json:"calls"`
	Errors  int     `json:"errors"`
	Seconds float64 `json:"seconds"`
	// CallsPerSecond counts successful calls.
	CallsPerSecond float64 `json:"calls_per_second"`
	P50Ms          float64 `json:"p50_ms"`
	P90Ms          float64 `json:"p90_ms"`
	P99Ms          float64 `json:"p99_ms"`
	MaxMs          float64 `json:"max_ms"`
	// FirstError is the first failure, if any.
	FirstError string `json:"first_error,omitempty"`
}

// Source addresses of the bench's clients. The services cap the
// connections one client address holds (server.DefaultMaxConnsPerClient);
// on one machine every process would call from 127.0.0.1 and the edge's
// kept connections, the stock server's and the load generator's would add
// up against one cap, which no deployment sees. Linux routes all of
// 127.0.0.0/8 to the loopback interface, so each client takes its own.
const (
	LoadAddr  = "127.0.0.2"
	StockAddr = "127.0.0.3"
)

// DialFrom dials TCP from the local address ip.
func DialFrom(ip string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return d.DialContext
}

// Load runs cfg's callers until its duration has passed and every call in
// flight has answered.
func Load(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if cfg.Callers < 1 || cfg.Duration <= 0 {
		return LoadResult{}, errors.New("load: callers and duration must be positive")
	}
	// One HTTP/1.1 connection per caller, kept alive: what an MCP client
	// (and a Connect client on a plain http.Client) uses. The callers dial
	// from a loopback address of their own, as a separate machine would.
	client := &http.Client{Transport: &http.Transport{
		DialContext:         DialFrom(LoadAddr),
		MaxIdleConns:        cfg.Callers,
		MaxIdleConnsPerHost: cfg.Callers,
		IdleConnTimeout:     time.Minute,
	}}
	defer client.CloseIdleConnections()
	call, err := newCaller(client, cfg)
	if err != nil {
		return LoadResult{}, err
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errCount  atomic.Int64
		firstErr  atomic.Value
		wg        sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	for range cfg.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				t0 := time.Now()
				if err := call(ctx); err != nil {
					errCount.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res := LoadResult{Kind: cfg.Kind, Callers: cfg.Callers, Calls: len(latencies), Errors: int(errCount.Load()), Seconds: elapsed.Seconds()}
	if s, ok := firstErr.Load().(string); ok {
		res.FirstError = s
	}
	if len(latencies) == 0 {
		return res, nil
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(float64(len(latencies)-1)*p)].Microseconds()) / 1000
	}
	res.CallsPerSecond = float64(len(latencies)) / elapsed.Seconds()
	res.P50Ms, res.P90Ms, res.P99Ms, res.MaxMs = pct(0.50), pct(0.90), pct(0.99), pct(1)
	return res, nil
}

// newCaller returns the function that makes one call of cfg's kind and
// checks its answer.
func newCaller(client *http.Client, cfg LoadConfig) (func(context.Context) error, error) {
	switch cfg.Kind {
	case KindMCP:
		body := ToolCallBody("tasks_get", `{"task_id":"`+cfg.TaskID+`"}`)
		return func(ctx context.Context) error {
			_, err := PostToolCall(ctx, client, cfg.URL, "tasks_get", body)
			return err
		}, nil
	case KindMCPCapable:
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get","arguments":{"task_id":"` + cfg.TaskID + `"},"_meta":` + CapableMeta + `}}`)
		return func(ctx context.Context) error {
			_, err := PostToolCall(ctx, client, cfg.URL, "tasks_get", body)
			return err
		}, nil
	case KindMCPSession:
		sessions := &sessionPool{client: client, url: cfg.URL, free: make(chan string, cfg.Callers)}
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get","arguments":{"task_id":"` + cfg.TaskID + `"}}}`)
		return func(ctx context.Context) error {
			id, err := sessions.get(ctx)
			if err != nil {
				return err
			}
			defer sessions.put(id)
			_, _, err = postMCP(ctx, client, cfg.URL, SessionProtocol, id, "tools/call", "tasks_get", body)
			return err
		}, nil
	case KindMCPWrite:
		var n atomic.Int64
		return func(ctx context.Context) error {
			i := n.Add(1) % WriteKeys
			_, err := PostToolCall(ctx, client, cfg.URL, "memory_save", ToolCallBody("memory_save", fmt.Sprintf(`{"key":"bench/%d","content":"note %d"}`, i, i)))
			return err
		}, nil
	case KindConnectJSONWrite:
		memory := memoryv1connect.NewMemoryServiceClient(client, cfg.URL, connect.WithInterceptors(bearer(cfg.Token)), connect.WithProtoJSON())
		var n atomic.Int64
		return func(ctx context.Context) error {
			i := n.Add(1) % WriteKeys
			_, err := memory.Save(ctx, &memoryv1.SaveRequest{Key: fmt.Sprintf("bench/%d", i), Content: fmt.Sprintf("note %d", i)})
			return err
		}, nil
	case KindMCPAdminWrite:
		agents := newAgentPool()
		return func(ctx context.Context) error {
			return agents.change(func(id string, status agentsv1.AgentStatus) error {
				return elicitedSetStatus(ctx, client, cfg.URL, id, status)
			})
		}, nil
	case KindConnectJSONAdminWrite:
		svc := agentsv1connect.NewAgentsServiceClient(client, cfg.URL, connect.WithInterceptors(bearer(cfg.Token)), connect.WithProtoJSON())
		agents := newAgentPool()
		return func(ctx context.Context) error {
			return agents.change(func(id string, status agentsv1.AgentStatus) error {
				res, err := svc.SetStatus(ctx, &agentsv1.SetStatusRequest{AgentId: id, Status: status, Reason: AdminReason})
				if err == nil && res.GetAgent().GetStatus() != status {
					err = fmt.Errorf("SetStatus left agent %s %s, want %s", id, res.GetAgent().GetStatus(), status)
				}
				return err
			})
		}, nil
	case KindConnectJSON, KindConnectProto:
		opts := []connect.ClientOption{connect.WithInterceptors(bearer(cfg.Token))}
		if cfg.Kind == KindConnectJSON {
			opts = append(opts, connect.WithProtoJSON())
		}
		tasks := tasksv1connect.NewTasksServiceClient(client, cfg.URL, opts...)
		return func(ctx context.Context) error {
			res, err := tasks.Get(ctx, &tasksv1.GetRequest{TaskId: cfg.TaskID})
			if err != nil {
				return err
			}
			if res.GetTask().GetId() != cfg.TaskID {
				return fmt.Errorf("the direct Get answered task %q, want %q", res.GetTask().GetId(), cfg.TaskID)
			}
			return nil
		}, nil
	}
	return nil, fmt.Errorf("load: unknown kind %q (want %s)", cfg.Kind,
		strings.Join([]string{KindMCP, KindMCPCapable, KindMCPSession, KindConnectJSON, KindConnectProto, KindMCPWrite, KindConnectJSONWrite, KindMCPAdminWrite, KindConnectJSONAdminWrite}, ", "))
}

// agentPool hands each admin write an agent no other call is changing, and
// the status that changes it: every agent starts active and each call
// flips it, so every call is a write.
type agentPool struct {
	free   chan int
	paused []bool // by agent; read and flipped only by the call holding it
}

func newAgentPool() *agentPool {
	p := &agentPool{free: make(chan int, AdminAgents), paused: make([]bool, AdminAgents)}
	for i := range AdminAgents {
		p.free <- i
	}
	return p
}

// change runs set on a free agent with the status it does not have, and
// records the change when set succeeds.
func (p *agentPool) change(set func(id string, status agentsv1.AgentStatus) error) error {
	i := <-p.free
	defer func() { p.free <- i }()
	status := agentsv1.AgentStatus_AGENT_STATUS_PAUSED
	if p.paused[i] {
		status = agentsv1.AgentStatus_AGENT_STATUS_ACTIVE
	}
	if err := set(AdminAgentID(i), status); err != nil {
		return err
	}
	p.paused[i] = !p.paused[i]
	return nil
}

// CapableMeta is the _meta of a stateless tools/call from a client that
// can answer every kind of question.
const CapableMeta = `{"io.modelcontextprotocol/protocolVersion":"` + ModernProtocol +
	`","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"benchmesh","version":"1"}}`

// ElicitingMeta is the _meta of a stateless tools/call from a client that
// can answer form elicitation.
const ElicitingMeta = `{"io.modelcontextprotocol/protocolVersion":"` + ModernProtocol +
	`","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}}},"io.modelcontextprotocol/clientInfo":{"name":"benchmesh","version":"1"}}`

// elicitedSetStatus makes one elicited admin write through the edge at url:
// agents_set_status without its confirmation, which the edge asks for, then
// the same call again with the answer.
func elicitedSetStatus(ctx context.Context, client *http.Client, url, agentID string, status agentsv1.AgentStatus) error {
	const tool = "agents_set_status"
	args := fmt.Sprintf(`{"agent_id":%q,"status":%q}`, agentID, status.String())
	out, err := PostToolCall(ctx, client, url, tool, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+
		`","arguments":`+args+`,"_meta":`+ElicitingMeta+`}}`))
	if err != nil {
		return err
	}
	var first struct {
		Result struct {
			ResultType    string                     `json:"resultType"`
			RequestState  string                     `json:"requestState"`
			InputRequests map[string]json.RawMessage `json:"inputRequests"`
		} `json:"result"`
	}
	if err := json.Unmarshal(sseData(out), &first); err != nil {
		return fmt.Errorf("%s: the first answer is not JSON-RPC: %w", tool, err)
	}
	r := first.Result
	if r.ResultType != "input_required" || len(r.InputRequests) != 1 || r.RequestState == "" {
		return fmt.Errorf("%s did not ask for its confirmation: %.300s", tool, out)
	}
	var key string
	for k := range r.InputRequests {
		key = k
	}
	answers, err := json.Marshal(map[string]any{key: map[string]any{"action": "accept", "content": map[string]any{"confirm": true, "reason": AdminReason}}})
	if err != nil {
		return err
	}
	state, err := json.Marshal(r.RequestState)
	if err != nil {
		return err
	}
	out, err = PostToolCall(ctx, client, url, tool, []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"`+tool+
		`","arguments":`+args+`,"inputResponses":`+string(answers)+`,"requestState":`+string(state)+`,"_meta":`+ElicitingMeta+`}}`))
	if err != nil {
		return err
	}
	if !bytes.Contains(out, []byte(`"resultType":"complete"`)) || !bytes.Contains(out, []byte(status.String())) {
		return fmt.Errorf("%s with its confirmation did not complete the change: %.300s", tool, out)
	}
	return nil
}

// sseData is the data of the one event of an SSE answer, or the answer
// itself when it is plain JSON.
func sseData(b []byte) []byte {
	for line := range bytes.Lines(b) {
		if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			return d
		}
	}
	return b
}

// bearer sends token as the bearer token of every call.
func bearer(token string) connect.UnaryInterceptorFunc {
	auth := "Bearer " + token
	return func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set("Authorization", auth)
			return next(ctx, req)
		}
	}
}

// ToolCallBody is a stateless tools/call request of tool with the JSON
// object args, from a client that declares no capabilities.
func ToolCallBody(tool, args string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args +
		`,"_meta":{"io.modelcontextprotocol/protocolVersion":"` + ModernProtocol + `","io.modelcontextprotocol/clientCapabilities":{}}}}`)
}

// PostToolCall posts body, a tools/call of tool, to the MCP endpoint url
// and returns the answer; a non-200 status, a JSON-RPC error or a tool error
// is an error.
func PostToolCall(ctx context.Context, client *http.Client, url, tool string, body []byte) ([]byte, error) {
	out, _, err := postMCP(ctx, client, url, ModernProtocol, "", "tools/call", tool, body)
	return out, err
}

// SessionProtocol is the protocol version of KindMCPSession.
const SessionProtocol = "2025-11-25"

// postMCP posts body, a request of method (of tool name, for tools/call),
// to the MCP endpoint url at protocol version, within session sessionID
// when it is set, and returns the answer and its headers; a non-2xx
// status, a JSON-RPC error or a tool error is an error. A notification is
// answered with no body.
func postMCP(ctx context.Context, client *http.Client, url, version, sessionID, method, name string, body []byte) ([]byte, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if version != "" {
		h.Set("Mcp-Protocol-Version", version)
	}
	if sessionID != "" {
		h.Set("Mcp-Session-Id", sessionID)
	}
	if version >= ModernProtocol {
		h.Set("Mcp-Method", method)
		if name != "" {
			h.Set("Mcp-Name", name)
		}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	what := method
	if name != "" {
		what = name
	}
	notification := strings.HasPrefix(method, "notifications/")
	if resp.StatusCode/100 != 2 || (!notification && !bytes.Contains(out, []byte(`"result"`))) || bytes.Contains(out, []byte(`"isError":true`)) {
		return nil, nil, fmt.Errorf("%s answered %d: %.300s", what, resp.StatusCode, strings.TrimSpace(string(out)))
	}
	return out, resp.Header, nil
}

// sessionPool hands each call of KindMCPSession a session no other call is
// using, opening one when none is free: one per caller.
type sessionPool struct {
	client *http.Client
	url    string
	free   chan string
}

func (p *sessionPool) get(ctx context.Context) (string, error) {
	select {
	case id := <-p.free:
		return id, nil
	default:
	}
	_, h, err := postMCP(ctx, p.client, p.url, "", "", "initialize", "", []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+
		SessionProtocol+`","capabilities":{"roots":{"listChanged":true},"elicitation":{}},"clientInfo":{"name":"benchmesh","version":"1"}}}`))
	if err != nil {
		return "", err
	}
	id := h.Get("Mcp-Session-Id")
	if id == "" {
		return "", errors.New("initialize answered without an Mcp-Session-Id")
	}
	if _, _, err := postMCP(ctx, p.client, p.url, SessionProtocol, id, "notifications/initialized", "", []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		return "", err
	}
	return id, nil
}

func (p *sessionPool) put(id string) {
	select {
	case p.free <- id:
	default:
	}
}
