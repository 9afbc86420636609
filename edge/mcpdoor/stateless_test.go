package mcpdoor_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// statelessMeta is the _meta of a well-formed 2026-07-28 request.
const statelessMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"wire-test","version":"1"}}`

// statelessAnswer is one JSON-RPC answer of the stateless protocol and its
// HTTP status.
type statelessAnswer struct {
	status int
	ID     json.RawMessage `json:"id"`
	Result map[string]any  `json:"result"`
	Error  *struct {
		Code int            `json:"code"`
		Data map[string]any `json:"data"`
	} `json:"error"`
}

func statelessPost(t *testing.T, url string, h http.Header, body string) statelessAnswer {
	t.Helper()
	res, raw := edgetest.Post(t, url, h, body)
	var a statelessAnswer
	if err := json.Unmarshal(edgetest.LastMessage(raw), &a); err != nil {
		t.Fatalf("%s: answer %d %s is not JSON-RPC: %v", body, res.StatusCode, raw, err)
	}
	a.status = res.StatusCode
	return a
}

// The wire rules of the 2026-07-28 (stateless) protocol, each as a client
// meets it: what a malformed request is refused with — JSON-RPC code and
// HTTP status, checked in the order the protocol gives (_meta, then the
// version header against _meta, then the version, then the routing
// headers, then the method) — and what every result carries.
func TestStatelessWireRules(t *testing.T) {
	t.Parallel()
	f := edgetest.NewFixture(t, nil)
	headers := func(method string, edit func(http.Header)) http.Header {
		h := edgetest.ModernHeaders(method)
		if edit != nil {
			edit(h)
		}
		return h
	}
	refusals := []struct {
		name   string
		h      http.Header
		body   string
		code   int
		status int
	}{
		{"no _meta", headers("server/discover", nil),
			`{"jsonrpc":"2.0","id":101,"method":"server/discover","params":{}}`, -32602, 400},
		{"_meta without protocolVersion", headers("server/discover", nil),
			`{"jsonrpc":"2.0","id":102,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}`, -32602, 400},
		{"_meta without clientCapabilities", headers("server/discover", nil),
			`{"jsonrpc":"2.0","id":104,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, -32602, 400},
		{"version header differs from _meta", headers("server/discover", nil),
			`{"jsonrpc":"2.0","id":302,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}}`, -32020, 400},
		{"Mcp-Method names another method", headers("prompts/list", nil),
			`{"jsonrpc":"2.0","id":11,"method":"tools/list","params":{` + statelessMeta + `}}`, -32020, 400},
		{"Mcp-Method missing", headers("", func(h http.Header) { h.Del("Mcp-Method") }),
			`{"jsonrpc":"2.0","id":12,"method":"tools/list","params":{` + statelessMeta + `}}`, -32020, 400},
		{"Mcp-Method in another case", headers("TOOLS/LIST", nil),
			`{"jsonrpc":"2.0","id":13,"method":"tools/list","params":{` + statelessMeta + `}}`, -32020, 400},
		{"Mcp-Name names another tool", headers("tools/call", func(h http.Header) { h.Set("Mcp-Name", "wrong_tool_name") }),
			`{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},` + statelessMeta + `}}`, -32020, 400},
		{"Mcp-Name missing", headers("tools/call", nil),
			`{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},` + statelessMeta + `}}`, -32020, 400},
	}
	for _, m := range []string{"initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe", "unknown/method"} {
		refusals = append(refusals, struct {
			name   string
			h      http.Header
			body   string
			code   int
			status int
		}{"removed method " + m, headers(m, nil), `{"jsonrpc":"2.0","id":500,"method":"` + m + `","params":{` + statelessMeta + `}}`, -32601, 404})
	}
	for _, r := range refusals {
		a := statelessPost(t, f.URL, r.h, r.body)
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal([]byte(r.body), &req)
		if a.Error == nil || a.Error.Code != r.code || a.status != r.status || string(a.ID) != string(req.ID) {
			t.Errorf("%s: answered %d %+v (id %s), want %d with code %d and id %s", r.name, a.status, a.Error, a.ID, r.status, r.code, req.ID)
		}
	}

	// Discovery, and an unsupported version named with what is supported.
	discover := statelessPost(t, f.URL, headers("server/discover", nil),
		`{"jsonrpc":"2.0","id":201,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if discover.Result == nil || discover.status != 200 {
		t.Fatalf("server/discover without clientInfo = %d %+v, want a result", discover.status, discover.Error)
	}
	supported, _ := discover.Result["supportedVersions"].([]any)
	if !slices.Contains(supported, any("2026-07-28")) || discover.Result["capabilities"] == nil {
		t.Errorf("discover = %v, want 2026-07-28 among the supported versions and capabilities", discover.Result)
	}
	if info, _ := discover.Result["_meta"].(map[string]any)["io.modelcontextprotocol/serverInfo"].(map[string]any); info["name"] == nil || info["version"] == nil {
		t.Errorf("discover _meta = %v, want the server's name and version", discover.Result["_meta"])
	}
	unsupported := statelessPost(t, f.URL, headers("server/discover", func(h http.Header) { h.Set("Mcp-Protocol-Version", "v999.0.0") }),
		`{"jsonrpc":"2.0","id":301,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v999.0.0","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if unsupported.Error == nil || unsupported.Error.Code != -32022 || unsupported.status != 400 || unsupported.Error.Data["requested"] != "v999.0.0" {
		t.Fatalf("unsupported version = %d %+v, want 400, -32022 naming v999.0.0", unsupported.status, unsupported.Error)
	}
	named, _ := unsupported.Error.Data["supported"].([]any)
	for _, v := range named {
		if !slices.Contains(supported, v) {
			t.Errorf("the -32022 error names %v as supported; discover does not (%v)", v, supported)
		}
	}
	if len(named) == 0 {
		t.Error("the -32022 error names no supported version")
	}

	// Routing headers are matched after trimming; their names in any case.
	padded := statelessPost(t, f.URL, headers("tools/call", func(h http.Header) { h.Set("Mcp-Name", "  testing_echo  ") }),
		`{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},`+statelessMeta+`}}`)
	if padded.Result == nil || padded.Result["resultType"] != "complete" {
		t.Errorf("tools/call with a padded Mcp-Name = %d %+v, want a complete result", padded.status, padded.Error)
	}

	// Every result says its type; lists and reads say how long they may be
	// cached, and by whom. A list whose capability discover does not
	// declare is not served (this edge's domains have no prompts).
	caps, _ := discover.Result["capabilities"].(map[string]any)
	for _, m := range []string{"server/discover", "tools/list", "prompts/list", "resources/list", "resources/templates/list"} {
		a := statelessPost(t, f.URL, headers(m, nil), `{"jsonrpc":"2.0","id":7,"method":"`+m+`","params":{`+statelessMeta+`}}`)
		declared := m == "server/discover" || caps[strings.SplitN(m, "/", 2)[0]] != nil
		if !declared {
			if a.Error == nil || a.Error.Code != -32601 || a.status != 404 {
				t.Errorf("%s, not declared = %d %+v, want 404 with -32601", m, a.status, a.Error)
			}
			continue
		}
		if a.Result == nil {
			t.Errorf("%s = %d %+v, want a result", m, a.status, a.Error)
			continue
		}
		ttl, isNumber := a.Result["ttlMs"].(float64)
		scope := a.Result["cacheScope"]
		if a.Result["resultType"] != "complete" || !isNumber || ttl < 0 || ttl != float64(int64(ttl)) || (scope != "public" && scope != "private") {
			t.Errorf("%s: resultType %v, ttlMs %v, cacheScope %v; want complete, a whole number ≥ 0, public or private", m, a.Result["resultType"], a.Result["ttlMs"], scope)
		}
	}
}
