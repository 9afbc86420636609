package mcpdoor_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// FuzzMCPRequest throws arbitrary bodies and MCP headers at the edge's HTTP
// handler. Whatever arrives: no panic, no 5xx, and every refusal is a JSON
// body holding a JSON-RPC error — a parse error for bodies that are not
// JSON. Run it with go test -fuzz FuzzMCPRequest ./edge/mcpdoor.
func FuzzMCPRequest(f *testing.F) {
	meta := `"_meta":` + edgetest.ModernMeta
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	deepObj := strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000)
	seeds := []struct{ body, version, method, name, accept string }{
		{"", "", "", "", ""},
		{"", "2026-07-28", "tools/list", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`, "2026-07-28", "tools/list", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},` + meta + `}}`, "2026-07-28", "tools/call", "testing_echo", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`, "", "", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/li`, "2026-07-28", "tools/list", "", ""},                                // truncated
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","argu`, "2025-06-18", "", "", ""}, // truncated
		{`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, "2025-06-18", "", "", ""}, // batch
		{`[]`, "2026-07-28", "tools/list", "", ""},
		{deep, "2026-07-28", "tools/list", "", ""},
		{deepObj, "", "", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"` + deep + `"},` + meta + `}}`, "2026-07-28", "tools/call", "testing_echo", ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"testing_echo\",\"arguments\":{\"message\":\"\xff\xfe\xc3\"}," + meta + "}}", "2026-07-28", "tools/call", "testing_echo", ""}, // invalid UTF-8
		{"\xef\xbb\xbf{\"jsonrpc\":\"2.0\"}", "", "", "", ""},
		{"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"\xc3\x28\"}", "2026-07-28", "\xc3\x28", "", ""},
		{`{"jsonrpc":"2.0","id":1e400,"method":"tools/list","params":{` + meta + `}}`, "2026-07-28", "tools/list", "", ""}, // huge numbers
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_list_items","arguments":{"limit":99999999999999999999999999,"offset":-1e308},` + meta + `}}`, "2026-07-28", "tools/call", "testing_list_items", ""},
		{`{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}`, "2025-06-18", "", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_purge","arguments":{"agent_id":"a","confirm":true,"reason":"r"},` + meta + `}}`, "2026-07-28", "tools/call", "testing_purge", ""},
		{`{"jsonrpc":"2.0","id":null,"method":"tools/list"}`, "2026-07-28", "tools/list", "", ""},
		{`{"jsonrpc":"1.0","id":1,"method":"tools/list"}`, "2025-11-25", "", "", ""},
		{`{"id":1,"result":{}}`, "2026-07-28", "", "", ""},
		{`{"jsonrpc":"2.0","method":"notifications/initialized"}`, "2025-06-18", "", "", ""},
		{`null`, "2026-07-28", "", "", ""},
		{`"just a string"`, "", "", "", "text/html"},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`, "2099-13-45", "tools/list", "", ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + meta + `}}`, "zzz", "", "", "application/json"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.version, s.method, s.name, s.accept)
	}
	fx := edgetest.NewFixture(f, func(c *edge.Config) {
		c.MCP.Addr = "127.0.0.1:7100" // served in process, as if on loopback
		c.CallTimeout = 200 * time.Millisecond
		c.MCP.MaxBodyBytes = 256 << 10
	})
	handler := fx.Edge.Handler()
	f.Fuzz(func(t *testing.T, body []byte, version, method, name, accept string) {
		req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader(body))
		req.Host = "127.0.0.1:7100"
		req.Header.Set("Content-Type", "application/json")
		if accept == "" {
			accept = "application/json, text/event-stream"
		}
		setHeader(req.Header, "Accept", accept)
		setHeader(req.Header, "Mcp-Protocol-Version", version)
		setHeader(req.Header, "Mcp-Method", method)
		setHeader(req.Header, "Mcp-Name", name)
		rec := httptest.NewRecorder()
		done := make(chan struct{})
		go func() { defer close(done); handler.ServeHTTP(rec, req) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer within 10s for body %q (version %q method %q name %q)", body, version, method, name)
		}
		res := rec.Result()
		if res.StatusCode >= 500 {
			t.Fatalf("status %d for body %q: %s", res.StatusCode, body, rec.Body.Bytes())
		}
		if res.StatusCode >= 400 {
			var rpc struct {
				JSONRPC string `json:"jsonrpc"`
				Error   *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if !strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") || json.Unmarshal(rec.Body.Bytes(), &rpc) != nil ||
				rpc.JSONRPC != "2.0" || rpc.Error == nil || rpc.Error.Code == 0 || rpc.Error.Message == "" {
				t.Fatalf("status %d with a body that is not a JSON-RPC error: %q (request %q)", res.StatusCode, rec.Body.Bytes(), body)
			}
			if !json.Valid(body) && rpc.Error.Code != -32700 && res.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("a body that is not JSON got code %d, want -32700 (parse error)", rpc.Error.Code)
			}
		}
	})
}

// setHeader sets a header when the value is one an HTTP client could send.
func setHeader(h http.Header, k, v string) {
	if v == "" || strings.ContainsAny(v, "\r\n\x00") {
		return
	}
	h.Set(k, v)
}
