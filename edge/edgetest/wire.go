package edgetest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/edge"
)

// ModernHeaders are the headers of a stateless request for method.
func ModernHeaders(method string) http.Header {
	return http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {method}}
}

// Post sends one raw MCP POST and returns the response and its body.
func Post(t testing.TB, url string, h http.Header, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header[k] = v
	}
	res, err := TestClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, b
}

// Delete sends a DELETE with headers h (a session's end) and returns its
// status.
func Delete(t testing.TB, url string, h http.Header) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = h.Clone()
	res, err := TestClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// TasksCaps are the capabilities of a client that follows tasks and
// answers forms.
var TasksCaps = map[string]any{"elicitation": map[string]any{"form": map[string]any{}}, "extensions": map[string]any{edge.ExtensionTasks: map[string]any{}}}

// TaskRequest sends one 2026-07-28 request with caps (nil: none) and
// returns its reply.
func TaskRequest(t *testing.T, url, method string, params map[string]any, caps map[string]any) RpcReply {
	t.Helper()
	if caps == nil {
		caps = map[string]any{}
	}
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": caps}
	if m, ok := params["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	h := ModernHeaders(method)
	if id, ok := params["taskId"].(string); ok {
		h.Set("Mcp-Name", id)
	}
	if name, ok := params["name"].(string); ok {
		h.Set("Mcp-Name", name)
	}
	_, raw := Post(t, url, h, string(body))
	var r RpcReply
	if err := json.Unmarshal(LastMessage(raw), &r); err != nil {
		t.Fatalf("%s answered %s", method, raw)
	}
	return r
}

// TestClient sends the tests' raw requests; X-Test-Host sets the Host.
var TestClient = &http.Client{Transport: HostTransport{}}

// HostTransport moves X-Test-Host into the request's Host.
type HostTransport struct{}

func (HostTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if h := r.Header.Get("X-Test-Host"); h != "" {
		r = r.Clone(r.Context())
		r.Host = h
		r.Header.Del("X-Test-Host")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// RpcReply is one JSON-RPC response.
type RpcReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

const ModernMeta = `{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// AllVersions are the protocol versions one edge serves.
var AllVersions = []string{"2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"}

func WaitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// JsonEqual reports whether two JSON documents are equal as values.
func JsonEqual(a, b string) bool {
	var x, y any
	return json.Unmarshal([]byte(a), &x) == nil && json.Unmarshal([]byte(b), &y) == nil && cmp.Equal(x, y)
}
