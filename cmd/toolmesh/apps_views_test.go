package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/toolmesh/toolmesh/internal/testsupport/browsertest"
	"github.com/toolmesh/toolmesh/proto/gen/assets"
)

// hostile is text a view shows that would run if a view wrote it as markup.
const hostile = `<img src=x onerror="parent.postMessage('pwned','*')"><script>parent.postMessage('pwned','*')</script>`

// TestViewsEscapeWhatTheyShow renders each view, in Chromium, from results
// whose every string is markup that would run if it were written as HTML, in
// a sandboxed frame under the CSP the views' resources declare, with a
// minimal host of the view protocol: the strings show as text, nothing runs,
// and the page reports no problem (a CSP violation included).
func TestViewsEscapeWhatTheyShow(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Chromium")
	}
	envelope := func(data map[string]any) map[string]any {
		sc := map[string]any{"status": "ok", "data": data}
		b, _ := json.Marshal(sc)
		return map[string]any{"content": []any{map[string]any{"type": "text", "text": string(b)}}, "structuredContent": sc}
	}
	cases := []struct {
		view   string
		result map[string]any
	}{
		{"owner/v1/views/ask-card.html", envelope(map[string]any{"ask": map[string]any{"ask_id": "ask_0", "agent_id": hostile, "question": hostile,
			"options": []string{hostile, "fine"}, "context": hostile, "status": "ASK_STATUS_PENDING", "expire_time": "2026-12-06T10:00:00Z"}})},
		{"owner/v1/views/ask-card.html", envelope(map[string]any{"ask": map[string]any{"ask_id": "ask_0", "agent_id": "a", "question": hostile,
			"status": "ASK_STATUS_ANSWERED", "answer": hostile, "answered_by": hostile}})},
		{"owner/v1/views/ask-card.html", map[string]any{"isError": true, "content": []any{map[string]any{"type": "text", "text": hostile}},
			"structuredContent": map[string]any{"status": "error", "domain_code": "not_found", "message": hostile}}},
		{"schedules/v1/views/schedule-card.html", envelope(map[string]any{"schedule": map[string]any{"id": "sch_0", "agent_id": hostile, "description": hostile,
			"interval_seconds": 60, "action": map[string]any{"tool": hostile, "arguments": map[string]any{hostile: hostile}},
			"status": "SCHEDULE_STATUS_PENDING_APPROVAL", "next_run_times": []string{"2026-12-06T10:00:00Z"}, "decision": map[string]any{"decided_by": hostile, "note": hostile}}})},
		{"workflows/v1/views/run-view.html", envelope(map[string]any{"run": map[string]any{"run_id": "run_0", "workflow_id": "wf_0", "workflow_name": hostile,
			"agent_id": hostile, "status": "RUN_STATUS_FAILED", "error": map[string]any{"node_id": hostile, "message": hostile},
			"nodes": []any{map[string]any{"node_id": hostile, "status": "NODE_STATUS_FAILED"}, map[string]any{"node_id": "b", "status": hostile}}}})},
	}
	b := browsertest.Start(t)
	for i, c := range cases {
		t.Run(fmt.Sprintf("%d %s", i, c.view), func(t *testing.T) {
			html, err := fs.ReadFile(assets.FS, "toolmesh/"+c.view)
			if err != nil {
				t.Fatal(err)
			}
			// The policy of the views' resources (no domain at all).
			policy := `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'none'; frame-src 'none'; base-uri 'none'">`
			doc := strings.Replace(string(html), "<head>", "<head>"+policy, 1)
			view, _ := json.Marshal(doc)
			result, _ := json.Marshal(c.result)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/" {
					http.NotFound(w, r)
					return
				}
				fmt.Fprintf(w, `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>host</title><link rel="icon" href="data:,"></head><body><script>
window.pwned = false;
const f = document.createElement("iframe");
f.setAttribute("sandbox", "allow-scripts");
f.srcdoc = %s;
document.body.append(f);
const send = (m) => f.contentWindow.postMessage(Object.assign({jsonrpc: "2.0"}, m), "*");
window.addEventListener("message", (ev) => {
  if (ev.source !== f.contentWindow) return;
  const m = ev.data;
  if (m === "pwned") { window.pwned = true; return; }
  if (m.method === "ui/initialize") send({id: m.id, result: {protocolVersion: "2026-01-26", hostInfo: {name: "t", version: "1"}, hostCapabilities: {}, hostContext: {theme: "dark"}}});
  else if (m.method === "ui/notifications/initialized") send({method: "ui/notifications/tool-result", params: %s});
  else if (m.id !== undefined) send({id: m.id, error: {code: -32601, message: "not served by this host"}});
});
</script></body></html>`, view, result)
			}))
			defer srv.Close()
			tab := b.Tab(t)
			if err := tab.Do(20*time.Second, chromedp.Navigate(srv.URL)); err != nil {
				t.Fatal(err)
			}
			frame := tab.Frame(t, 20*time.Second, func(i *target.Info) bool { return i.URL == "about:srcdoc" })
			if err := frame.Do(20*time.Second, chromedp.WaitVisible(chromedp.CSS("section, p.outcome"))); err != nil {
				t.Fatalf("the view rendered nothing: %v", err)
			}
			got, err := browsertest.Run(frame, 10*time.Second, chromedp.Evaluate[struct {
				Text    string `json:"text"`
				Images  int    `json:"images"`
				Scripts int    `json:"scripts"`
			}](`({text: document.body.textContent, images: document.querySelectorAll("img").length, scripts: document.scripts.length})`))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(got.Text, hostile) || got.Images != 0 || got.Scripts != 1 {
				t.Errorf("the view shows %d images, %d scripts and text %.200q; want the markup as text and only its own script", got.Images, got.Scripts, got.Text)
			}
			pwned, err := browsertest.Run(tab, 5*time.Second, chromedp.Evaluate[bool](`window.pwned`))
			if err != nil || pwned {
				t.Errorf("the markup ran in the view (%v)", err)
			}
			for _, p := range append(tab.Problems(), frame.Problems()...) {
				t.Errorf("reported: %s", p)
			}
		})
	}
}
