//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// frontName is the process o was sent to.
func (o outcome) frontName() string {
	if o.front == "" {
		return "edge"
	}
	return o.front
}

// consoleOwner is the owner at the console in a browser: one session
// (the local owner on loopback), its cookie kept, forms sent with the
// page's CSRF token.
type consoleOwner struct {
	base   string
	client *http.Client
}

func newConsoleOwner(base string) (*consoleOwner, error) {
	if base == "" {
		return nil, errors.New("toolmesh up printed no console URL")
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	return &consoleOwner{base: base, client: &http.Client{Jar: jar, Timeout: callTimeout,
		// A form's answer is a redirect (303) or the page again with
		// what went wrong: the status is the answer.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}, nil
}

var (
	pageSays   = regexp.MustCompile(`<p class="(?:error|notice)"[^>]*>([^<]+)<`)
	csrfField  = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	answerForm = regexp.MustCompile(`action="/asks/([^"/]+)/answer"`)
)

// consoleStatus is the domain code a console page's status stands for
// (the console's own mapping, console/inbox.go).
func consoleStatus(status int) string {
	switch status {
	case http.StatusSeeOther:
		return "ok"
	case http.StatusConflict:
		return "conflict"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusForbidden:
		return "permission_denied"
	}
	return fmt.Sprintf("http_%d", status)
}

// do sends one request to the console and classes its answer as an
// outcome of tool.
func (c *consoleOwner) do(tool, method, path string, form url.Values) (outcome, string) {
	o := outcome{front: "console", tool: tool, start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		o.err = err
		return o, ""
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.client.Do(req)
	o.end = time.Now()
	if err != nil {
		o.err = err
		return o, ""
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		o.err = err
		return o, ""
	}
	code := consoleStatus(resp.StatusCode)
	if method == http.MethodGet && resp.StatusCode == http.StatusOK {
		code = "ok"
	}
	if code == "ok" {
		o.env = envelope{Status: "ok"}
	} else {
		says := ""
		if m := pageSays.FindStringSubmatch(string(page)); m != nil {
			says = ": " + html.UnescapeString(m[1])
		}
		o.env = envelope{Status: "error", DomainCode: code, Message: fmt.Sprintf("console answered %d%s", resp.StatusCode, says)}
	}
	return o, string(page)
}

// consoleAnswers is the owner answering from the console: it loads the
// inbox and sends the answer form of every ask on it (the first page, the
// newest), and returns how many it saw (-1 when the inbox did not load).
func (w *chaosWorkload) consoleAnswers() int {
	o, page := w.console.do("console inbox", http.MethodGet, "/inbox", nil)
	w.record(o)
	if !o.ok() {
		return -1
	}
	token := csrfField.FindStringSubmatch(page)
	asks := answerForm.FindAllStringSubmatch(page, -1)
	if token == nil && len(asks) > 0 {
		w.record(outcome{front: "console", tool: "console inbox", start: o.start, end: o.end,
			env: envelope{Status: "error", DomainCode: "no_csrf", Message: "the inbox has answer forms but no CSRF token"}})
		return -1
	}
	for _, a := range asks {
		form := url.Values{"csrf": {html.UnescapeString(token[1])}, "answer": {"approve"}}
		// conflict: answered already (by the MCP owner, or a form whose
		// answer was lost); not_found: withdrawn when its start failed.
		a, _ := w.console.do("console answer", http.MethodPost, "/asks/"+a[1]+"/answer", form)
		w.record(a, "conflict", "not_found")
	}
	return len(asks)
}

// views is what an MCP Apps host does for the owner and the agent: it
// reads a view's resource (the ask card) and the agent's connections
// (metadata only).
func (w *chaosWorkload) views(int) {
	o := outcome{tool: "resources/read ask card", start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	res, err := w.plain.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://toolmesh/owner/ask-card"})
	cancel()
	o.end = time.Now()
	switch {
	case err != nil:
		o.err = err
	case len(res.Contents) == 0 || res.Contents[0].Text == "":
		o.env = envelope{Status: "error", DomainCode: "empty_view", Message: "the ask card's resource is empty"}
	default:
		o.env = envelope{Status: "ok"}
	}
	w.record(o)
	w.record(callTool(w.plain, "connections_list", map[string]any{}, ""))
}
