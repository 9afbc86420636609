package mcpdoor_test

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// TestFastPathAnswersAsTheSDKDoes sends the same requests to an edge that
// answers plain stateless tools/call requests itself and to one that sends
// everything through the SDK, and compares what a client sees. Requests the
// fast path declines (unusual metadata, mismatched headers, batches...) must
// come out the same too, since they take the SDK path on both.
var freshKey = regexp.MustCompile(`mcp-[0-9a-f]{32}`)

func TestFastPathAnswersAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	fast := edgetest.NewFixture(t, nil)
	slow := edgetest.NewFixture(t, func(c *edge.Config) { c.MCP.DisableFastPath = true })

	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	const metaInfo = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	type request struct {
		name    string
		headers map[string]string
		body    string
	}
	call := func(name, body string) request {
		return request{name: name, headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_echo"}, body: body}
	}
	cases := []request{
		call("echo", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},`+meta+`}}`),
		call("escaped id", `{"jsonrpc":"2.0","id":"\\u0061","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}`),
		call("fraction id", `{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}`),
		call("id to escape", `{"jsonrpc":"2.0","id":"<a&b>","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"\\ \" q"},`+meta+`}}`),
		call("string id and client info", `{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hé \u2028 <b>"},`+metaInfo+`}}`),
		call("invalid arguments", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":""},`+meta+`}}`),
		call("unknown argument", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"testing_echo","arguments":{"nope":1},`+meta+`}}`),
		call("array arguments", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"testing_echo","arguments":[1],`+meta+`}}`),
		call("no arguments", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"testing_echo",`+meta+`}}`),
		call("client idempotency key", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"k"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"dev.toolmesh/idempotencyKey":"k-1"}}}`),
		{name: "list tool", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_list_items"},
			body: `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"testing_list_items","arguments":{"offset":1,"limit":2},` + meta + `}}`},
		{name: "admin tool refused", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_purge"},
			body: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"testing_purge","arguments":{},` + meta + `}}`},
		{name: "name header mismatch", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_list_items"},
			body: `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},` + meta + `}}`},
		call("meta version mismatch", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}}}`),
		call("missing capabilities", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`),
		call("progress token", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`),
		call("notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}`),
		call("unknown tool", `{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"testing_nope","arguments":{},`+meta+`}}`),
		call("extra member", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"task":{},`+meta+`}}`),
		// Bodies that are not one JSON object: a parse error on both, though
		// the fast path's decoder alone would read a first object out of them.
		call("trailing brace", `{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}}`),
		call("trailing value", `{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}} 1`),
		call("two objects", `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}{}`),
		call("null", `null`),
		call("batch", `[{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}]`),
		call("null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}`),
		call("other method", `{"jsonrpc":"2.0","id":19,"method":"tools/list","params":{"name":"testing_echo",`+meta+`}}`),
		// Media types written otherwise than clients usually write them.
		{name: "content type with parameters", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_echo", "Content-Type": "Application/JSON; charset=utf-8", "Accept": "text/event-stream;q=0.9 , APPLICATION/json"},
			body: `{"jsonrpc":"2.0","id":21,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},` + meta + `}}`},
		{name: "accepts only JSON", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_echo", "Accept": "application/json"},
			body: `{"jsonrpc":"2.0","id":22,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},` + meta + `}}`},
		{name: "sends another type", headers: map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "testing_echo", "Content-Type": "application/json-seq"},
			body: `{"jsonrpc":"2.0","id":23,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},` + meta + `}}`},
		call("surrounding space", " \n"+`{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},`+meta+`}}`+"\n "),
	}
	do := func(url string, rq request) (int, http.Header, string) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(rq.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		for k, v := range rq.headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		// Each call gets a fresh idempotency key; everything else must match.
		return resp.StatusCode, resp.Header, freshKey.ReplaceAllString(string(b), "mcp-KEY")
	}
	for _, rq := range cases {
		t.Run(rq.name, func(t *testing.T) {
			fc, fh, fb := do(fast.URL, rq)
			sc, sh, sb := do(slow.URL, rq)
			if fc != sc {
				t.Errorf("status: fast path %d, SDK %d", fc, sc)
			}
			for _, h := range []string{"Content-Type", "Cache-Control"} {
				if fh.Get(h) != sh.Get(h) {
					t.Errorf("%s: fast path %q, SDK %q", h, fh.Get(h), sh.Get(h))
				}
			}
			if diff := cmp.Diff(sb, fb); diff != "" {
				t.Errorf("body differs (-SDK +fast path):\n%s", diff)
			}
		})
	}
}

// TestFastPathAsksAsTheSDKDoes: a client that can answer questions is
// served by the fast path too. Its calls that ask nothing, and its call of
// an administrative tool that asks for the confirmation, must reach the
// client as the SDK writes them; the question's round then completes the
// call either way.
func TestFastPathAsksAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	fast := m.Edge(t, nil)
	slow := m.Edge(t, func(c *edge.Config) { c.MCP.DisableFastPath = true })
	state := regexp.MustCompile(`"requestState":"[^"]+"`)
	const caps = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}}`
	post := func(url, tool, body string) string {
		t.Helper()
		h := edgetest.ModernHeaders("tools/call")
		h.Set("Mcp-Name", tool)
		resp, b := edgetest.Post(t, url, h, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s answered %d: %s", tool, resp.StatusCode, b)
		}
		return string(b)
	}
	same := func(name, tool, body string) (fastAnswer, slowAnswer string) {
		t.Helper()
		fastAnswer, slowAnswer = post(fast.URL, tool, body), post(slow.URL, tool, body)
		norm := func(s string) string {
			return state.ReplaceAllString(freshKey.ReplaceAllString(s, "mcp-KEY"), `"requestState":"STATE"`)
		}
		if diff := cmp.Diff(norm(slowAnswer), norm(fastAnswer)); diff != "" {
			t.Errorf("%s: body differs (-SDK +fast path):\n%s", name, diff)
		}
		return fastAnswer, slowAnswer
	}
	same("echo", "testing_echo", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"},`+caps+`}}`)
	same("invalid arguments", "testing_echo", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":""},`+caps+`}}`)

	m.Backend.SeedNotes("victim", 3)
	fa, sa := same("the confirmation asked", "testing_purge", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"testing_purge","arguments":{"agent_id":"victim"},`+caps+`}}`)
	if !strings.Contains(fa, `"resultType":"input_required"`) {
		t.Fatalf("the fast path did not ask for the confirmation: %s", fa)
	}
	for _, a := range []struct{ url, answer string }{{fast.URL, fa}, {slow.URL, sa}} {
		before := m.Backend.Executions("Purge")
		st := state.FindString(a.answer)
		key := regexp.MustCompile(`"inputRequests":\{"([^"]+)"`).FindStringSubmatch(a.answer)
		if st == "" || key == nil {
			t.Fatalf("no requestState or input request in %s", a.answer)
		}
		out := post(a.url, "testing_purge", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"testing_purge","arguments":{"agent_id":"victim"},"inputResponses":{"`+key[1]+
			`":{"action":"accept","content":{"confirm":true,"reason":"fast path test"}}},`+st+`,`+caps+`}}`)
		if !strings.Contains(out, `"resultType":"complete"`) || !strings.Contains(out, `\"status\":\"ok\"`) {
			t.Errorf("the confirmed purge did not complete: %s", out)
		}
		if n := m.Backend.Executions("Purge") - before; n != 1 {
			t.Errorf("the confirmed purge ran %d times, want once", n)
		}
	}
}
