package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// protocolVersion is the MCP era the console speaks to the edge: the
// stateless one, so any edge replica serves any call and a restarted edge
// needs no new session.
const protocolVersion = "2026-07-28"

// edgeClient calls tools through the edge as an MCP client, one client
// session per set of credentials.
type edgeClient struct {
	url  string
	http *http.Client

	mu       sync.Mutex
	sessions map[string]*mcp.ClientSession // by access token ("": the local owner)
}

func newEdgeClient(url string, hc *http.Client) *edgeClient {
	return &edgeClient{url: url, http: hc, sessions: map[string]*mcp.ClientSession{}}
}

// envelope is the edge's uniform tool result.
type envelope struct {
	Status     string          `json:"status"`
	Data       json.RawMessage `json:"data"`
	Pagination *pagination     `json:"pagination"`
	ErrorType  string          `json:"error_type"`
	DomainCode string          `json:"domain_code"`
	Message    string          `json:"message"`
	// Violation names the guardrail a refused call broke (missing_confirm,
	// missing_reason, ...).
	Violation string `json:"violation"`
}

type pagination struct {
	Offset     int  `json:"offset"`
	Limit      int  `json:"limit"`
	Total      int  `json:"total"`
	NextOffset *int `json:"next_offset"`
}

// errEdgeUnreachable wraps a call that did not reach the edge or got no
// answer from it.
var errEdgeUnreachable = errors.New("the edge is unreachable")

// call calls tool with args as p and returns its envelope, an error
// envelope included; the error is errEdgeUnreachable when the edge did not
// answer.
func (c *edgeClient) call(ctx context.Context, p person, tool string, args map[string]any) (envelope, error) {
	s, err := c.session(ctx, p)
	if err != nil {
		return envelope{}, fmt.Errorf("%w: %v", errEdgeUnreachable, err)
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if werr, ok := errors.AsType[*jsonrpc.Error](err); ok && werr.Code != codeRejectedByTransport {
		// A protocol error (a tool the person may not see is unknown to
		// them) is the edge's answer, not an outage.
		return envelope{Status: "error", DomainCode: "not_supported", Message: tool + ": " + werr.Message}, nil
	}
	if err != nil {
		c.drop(p, s)
		return envelope{}, fmt.Errorf("%w: %v", errEdgeUnreachable, err)
	}
	var env envelope
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &env)
	}
	if err != nil || env.Status == "" {
		return envelope{}, fmt.Errorf("%w: %s answered without an envelope", errEdgeUnreachable, tool)
	}
	return env, nil
}

// codeRejectedByTransport is the JSON-RPC error code the MCP SDK wraps
// around a request that never reached the edge (its HTTP request failed:
// the edge is down or restarting). That is an outage, not the edge's
// answer.
const codeRejectedByTransport = -32005

// session is p's client session, connected on first use.
func (c *edgeClient) session(ctx context.Context, p person) (*mcp.ClientSession, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[p.token]; s != nil {
		return s, nil
	}
	hc := c.http
	if p.token != "" {
		cp := *hc
		cp.Transport = bearer{token: p.token, next: transport(hc)}
		hc = &cp
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "toolmesh-console", Version: "1"}, nil)
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.url, HTTPClient: hc, DisableStandaloneSSE: true},
		&mcp.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		return nil, err
	}
	c.sessions[p.token] = s
	return s, nil
}

// drop forgets s after a failed call: the next call connects anew.
func (c *edgeClient) drop(p person, s *mcp.ClientSession) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions[p.token] == s {
		delete(c.sessions, p.token)
		_ = s.Close()
	}
}

func (c *edgeClient) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, s := range c.sessions {
		_ = s.Close()
		delete(c.sessions, k)
	}
}

func transport(hc *http.Client) http.RoundTripper {
	if hc.Transport != nil {
		return hc.Transport
	}
	return http.DefaultTransport
}

// bearer adds a person's access token to each request to the edge.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// forget ends p's client session (p signed out).
func (c *edgeClient) forget(p person) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.sessions[p.token]; s != nil && p.token != "" {
		delete(c.sessions, p.token)
		_ = s.Close()
	}
}
