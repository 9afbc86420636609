package console

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"time"
)

// pages are the templates under templates/: each page is the layout with
// its own "content"; error.html stands alone.
var pageNames = []string{"inbox", "runs", "run", "invocations", "agents", "credits", "connections", "audit", "mesh"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{"when": when, "until": until, "pretty": pretty, "runWord": func(v string) string { return statusWord(v, "RUN_STATUS_") },
		"invocationWord": func(v string) string { return statusWord(v, "INVOCATION_STATUS_") },
		"statusWord":     statusWord, "providerWord": providerWord, "plural": plural}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("console: parse %s: %w", name, err)
		}
		out[name] = t
	}
	t, err := template.New("error").Funcs(funcs).ParseFS(templateFS, "templates/error.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse error page: %w", err)
	}
	out["error"] = t
	return out, nil
}

// pageData is what the layout renders around a page's view.
type pageData struct {
	Title  string
	Nav    string
	Person person
	CSRF   string
	// SignOut offers signing out (not to the local owner).
	SignOut bool
	// Down says what does not work right now and what still does.
	Down string
	View any
}

func (c *Console) renderPage(w http.ResponseWriter, r *http.Request, s *session, page, title string, view any, err error) {
	status := http.StatusOK
	if err != nil {
		status = http.StatusServiceUnavailable
	}
	c.renderStatus(w, r, s, status, page, title, view, err)
}

func (c *Console) renderStatus(w http.ResponseWriter, r *http.Request, s *session, status int, page, title string, view any, err error) {
	c.execute(w, r, status, page, "layout", c.data(s, page, title, view, err))
}

// renderFragment renders one named template of page alone (no layout).
func (c *Console) renderFragment(w http.ResponseWriter, r *http.Request, s *session, page, name string, view any, err error) {
	status := http.StatusOK
	if err != nil {
		status = http.StatusServiceUnavailable
	}
	c.execute(w, r, status, page, name, c.data(s, page, "", view, err))
}

func (c *Console) data(s *session, page, title string, view any, err error) pageData {
	d := pageData{Title: title, Nav: page, Person: s.Person, CSRF: c.sessions.csrf(s), View: view, SignOut: c.signer != nil}
	if err != nil {
		d.Down = c.outage(err)
	}
	return d
}

// outage says, for a page that could not read what it shows, what is down
// and what still works.
func (c *Console) outage(err error) string {
	if te, ok := errors.AsType[*toolErr](err); ok {
		switch te.env.DomainCode {
		case "unavailable", "deadline_exceeded":
			return "A service behind the edge does not answer: " + te.env.Message + " Pages that need other services still work; `toolmesh up` restarts what died."
		}
		return "The edge refused to show it: " + te.env.Message
	}
	if errors.Is(err, errEdgeUnreachable) {
		return "The edge at " + c.cfg.EdgeURL + " does not answer, so nothing can be read or changed from the console until it is back. " +
			"Asks already made keep waiting for your answer; `toolmesh up` restarts the edge (see `toolmesh up status`)."
	}
	return "Something went wrong reading this page."
}

func (c *Console) execute(w http.ResponseWriter, r *http.Request, status int, page, name string, data any) {
	var buf bytes.Buffer
	if err := c.pages[page].ExecuteTemplate(&buf, name, data); err != nil {
		c.log.ErrorContext(r.Context(), "console.render_failed", "page", page, "error", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// refuse answers a request the console will not serve, with a page that
// says why.
func (c *Console) refuse(w http.ResponseWriter, r *http.Request, status int, message string) {
	c.execute(w, r, status, "error", "error", struct {
		Status  int
		Message string
	}{status, message})
}

// when shows an RFC 3339 time as the page shows times: UTC, to the minute.
func when(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ts
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

// until says how long from now until ts, roughly ("in 59 min").
func until(ts string) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return ""
	}
	d := time.Until(t)
	switch {
	case d <= 0:
		return "now"
	case d < time.Minute:
		return "in less than a minute"
	case d < time.Hour:
		return fmt.Sprintf("in %d min", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("in %d h %d min", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("in %d days", int(d/(24*time.Hour)))
}

// plural is one if n is 1 and many otherwise: {{.Total}} {{plural .Total
// "run" "runs"}}. n is any number the views hold (an int, a json.Number).
func plural(n any, one, many string) string {
	if fmt.Sprint(n) == "1" {
		return one
	}
	return many
}
