package mcpdoor_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
)

// TestSessionFastPathAnswersAsTheSDKDoes sends the same requests within a
// 2025-11-25 session to an edge that answers a session's plain tools/call
// itself and to one that sends everything through the SDK, and compares
// what the client sees. It also checks which requests the fast path served:
// the plain calls, and none of those that need the session (an
// administrative tool, a progress token, a client that set a log level).
// sessionVersion is the protocol version of the sessions these tests open.
const sessionVersion = "2025-11-25"

// openSession starts a session of a client that offers roots and form
// elicitation, and returns its headers once the edge has taken its
// notifications/initialized (a ping after it is answered in order).
func openSession(t *testing.T, f *edgetest.Fixture) http.Header {
	t.Helper()
	return openSessionWith(t, f, `{"roots":{"listChanged":true},"elicitation":{}}`)
}

// openSessionWith is openSession for a client declaring caps.
func openSessionWith(t *testing.T, f *edgetest.Fixture, caps string) http.Header {
	t.Helper()
	res, _ := edgetest.Post(t, f.URL, nil, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+sessionVersion+`","capabilities":`+caps+`,"clientInfo":{"name":"c","version":"1"}}}`)
	sid := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", res.StatusCode, sid)
	}
	h := http.Header{"Mcp-Session-Id": {sid}, "Mcp-Protocol-Version": {sessionVersion}}
	if res, _ := edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d", res.StatusCode)
	}
	if res, _ := edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","id":"ping","method":"ping"}`); res.StatusCode != http.StatusOK {
		t.Fatalf("ping: %d", res.StatusCode)
	}
	return h
}

func TestSessionFastPathAnswersAsTheSDKDoes(t *testing.T) {
	t.Parallel()
	fast := edgetest.NewFixture(t, nil)
	slow := edgetest.NewFixture(t, func(c *edge.Config) { c.MCP.DisableFastPath = true })

	type request struct {
		name string
		body string
		// header changes the session's headers (an empty value removes one).
		header map[string]string
		// direct: the fast path serves it.
		direct bool
	}
	call := func(name, body string, direct bool) request { return request{name: name, body: body, direct: direct} }
	cases := []request{
		call("echo", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"}}}`, true),
		call("string id", `{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hé \u2028 <b>"}}}`, true),
		call("id to escape", `{"jsonrpc":"2.0","id":"<a&b>","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"\\ \" q"}}}`, true),
		call("escaped id", `{"jsonrpc":"2.0","id":"\\u0061","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`, false),
		call("invalid arguments", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":""}}}`, true),
		call("unknown argument", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"testing_echo","arguments":{"nope":1}}}`, true),
		call("no arguments", `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"testing_echo"}}`, true),
		call("empty meta", `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"m"},"_meta":{}}}`, true),
		call("client idempotency key", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"k"},"_meta":{"dev.toolmesh/idempotencyKey":"k-1"}}}`, true),
		call("list tool", `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"testing_list_items","arguments":{"offset":1,"limit":2}}}`, true),
		call("admin tool", `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"testing_purge","arguments":{}}}`, false),
		call("progress token", `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"_meta":{"progressToken":"p"}}}`, false),
		call("stateless meta", `{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25"}}}`, false),
		call("unknown tool", `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"testing_nope","arguments":{}}}`, false),
		call("task", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"},"task":{}}}`, false),
		call("notification", `{"jsonrpc":"2.0","method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`, false),
		call("null id", `{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`, false),
		call("batch", `[{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}]`, false),
		call("trailing value", `{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}} 1`, false),
		call("other method", `{"jsonrpc":"2.0","id":15,"method":"tools/list"}`, false),
		{name: "no version header", body: `{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`,
			header: map[string]string{"Mcp-Protocol-Version": ""}, direct: true},
		{name: "other version header", body: `{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`,
			header: map[string]string{"Mcp-Protocol-Version": "2025-06-18"}, direct: false},
		{name: "unknown session", body: `{"jsonrpc":"2.0","id":18,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`,
			header: map[string]string{"Mcp-Session-Id": "nope"}, direct: false},
		{name: "last event id", body: `{"jsonrpc":"2.0","id":19,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`,
			header: map[string]string{"Last-Event-Id": "1"}, direct: false},
		{name: "another selection", body: `{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"x"}}}`,
			header: map[string]string{edge.HeaderToolsets: "testing"}, direct: false},
	}
	served := func() int { return len(fast.Logs.Events("mcp.session_call_served")) }
	run := func(t *testing.T, fh, sh http.Header, rq request) {
		t.Helper()
		with := func(h http.Header) http.Header {
			h = h.Clone()
			for k, v := range rq.header {
				if v == "" {
					h.Del(k)
				} else {
					h.Set(k, v)
				}
			}
			return h
		}
		before := served()
		fr, fb := edgetest.Post(t, fast.URL, with(fh), rq.body)
		if got := served() - before; got != map[bool]int{true: 1}[rq.direct] {
			t.Errorf("the fast path served it %d times, want direct=%v", got, rq.direct)
		}
		sr, sb := edgetest.Post(t, slow.URL, with(sh), rq.body)
		if fr.StatusCode != sr.StatusCode {
			t.Errorf("status: fast path %d, SDK %d", fr.StatusCode, sr.StatusCode)
		}
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if fr.Header.Get(h) != sr.Header.Get(h) {
				t.Errorf("%s: fast path %q, SDK %q", h, fr.Header.Get(h), sr.Header.Get(h))
			}
		}
		norm := func(b []byte) string { return freshKey.ReplaceAllString(string(b), "mcp-KEY") }
		if diff := cmp.Diff(norm(sb), norm(fb)); diff != "" {
			t.Errorf("body differs (-SDK +fast path):\n%s", diff)
		}
	}
	fh, sh := openSession(t, fast), openSession(t, slow)
	for _, rq := range cases {
		t.Run(rq.name, func(t *testing.T) { run(t, fh, sh, rq) })
	}

	// A client that offers URL elicitation may be asked to visit a page
	// over the session: the SDK serves its calls.
	const urlCaps = `{"elicitation":{"form":{},"url":{}}}`
	fh, sh = openSessionWith(t, fast, urlCaps), openSessionWith(t, slow, urlCaps)
	t.Run("URL elicitation offered", func(t *testing.T) {
		run(t, fh, sh, call("echo", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"hi"}}}`, false))
	})

	// A client that set a log level hears of failed calls over the
	// session: the SDK serves its calls.
	fh, sh = openSession(t, fast), openSession(t, slow)
	for _, h := range []http.Header{fh, sh} {
		f := map[bool]*edgetest.Fixture{true: fast, false: slow}[h.Get("Mcp-Session-Id") == fh.Get("Mcp-Session-Id")]
		if res, _ := edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","id":"lvl","method":"logging/setLevel","params":{"level":"debug"}}`); res.StatusCode != http.StatusOK {
			t.Fatalf("logging/setLevel: %d", res.StatusCode)
		}
	}
	t.Run("log level set", func(t *testing.T) {
		run(t, fh, sh, call("invalid arguments", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":""}}}`, false))
	})
}

// TestSessionFastPathCancels: a client's notifications/cancelled cancels a
// call the session fast path serves, as the SDK cancels its own; and once
// the client ends its session, its calls are the SDK's to refuse.
func TestSessionFastPathCancels(t *testing.T) {
	t.Parallel()
	logs := &logtest.Buffer{}
	backend := testingsvc.NewWith(testingsvc.Options{Log: logging.New(logs, logging.ParseLevel("info")), Delays: map[string]time.Duration{"Echo": time.Hour}})
	// No deadline ends the call: only its cancellation can.
	f := edgetest.NewFixtureOn(t, backend, servertest.Start(t, backend.Server()), func(c *edge.Config) { c.CallTimeout = time.Hour })
	h := openSession(t, f)

	type answer struct {
		status int
		body   string
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, f.URL, strings.NewReader(`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"slow"}}}`))
		if err != nil {
			answered <- answer{err: err}
			return
		}
		req.Header = h.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		res, err := edgetest.TestClient.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		answered <- answer{status: res.StatusCode, body: string(b), err: err}
	}()
	// The service holds the call (for an hour) until it is cancelled.
	for backend.Calls("Echo") == 0 {
		time.Sleep(time.Millisecond)
	}
	if res, _ := edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":41,"reason":"the user stopped it"}}`); res.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: %d", res.StatusCode)
	}
	var a answer
	select {
	case a = <-answered:
	case <-time.After(time.Minute):
		t.Fatal("the call still runs a minute after its cancellation")
	}
	if a.err != nil {
		t.Fatal(a.err)
	}
	if n := len(f.Logs.Events("mcp.session_call_served")); n != 1 {
		t.Fatalf("the fast path served %d calls, want the one cancelled", n)
	}
	// The service learns of it when the edge's request to it goes.
	ended := logs.Events(testingsvc.EventCallEnded)
	for ; len(ended) == 0; ended = logs.Events(testingsvc.EventCallEnded) {
		time.Sleep(time.Millisecond)
	}
	if len(ended) != 1 || ended[0]["cancelled"] != true {
		t.Fatalf("the service's call ended as %v, want one cancelled", ended)
	}
	if a.status != http.StatusOK || !strings.Contains(a.body, `"isError":true`) {
		t.Errorf("the cancelled call answered %d %s, want its error result", a.status, a.body)
	}

	// DELETE ends the session: the SDK answers its calls from then on.
	if status := edgetest.Delete(t, f.URL, h); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	res, body := edgetest.Post(t, f.URL, h, `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"testing_echo","arguments":{"message":"after"}}}`)
	if res.StatusCode != http.StatusNotFound {
		t.Errorf("a call in the ended session answered %d %s, want 404", res.StatusCode, body)
	}
	if n := len(f.Logs.Events("mcp.session_call_served")); n != 1 {
		t.Errorf("the fast path served %d calls, want only the first", n)
	}
}
