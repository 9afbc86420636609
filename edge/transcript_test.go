package edge_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1/tasksv1connect"
	"github.com/toolmesh/toolmesh/services/tasks"
	"github.com/toolmesh/toolmesh/services/tasks/tasksstore"
)

// Golden JSON-RPC transcripts: testdata/transcripts/*.txtar hold HTTP
// requests ("-- NN request --") and the edge's answers ("-- NN response
// --"). The requests are written by hand; `go test -run TestTranscripts
// -update` rewrites the responses. The archive comment's "config:" lines
// choose how the edge is configured:
//
//	config: read-only          WRITE and ADMIN tools refused
//	config: auth               bearer JWTs required ({{token SUBJECT SCOPES...}},
//	                           {{expired-token}} in requests)
//	config: call-timeout=300ms service call deadline
//	config: max-body=1024      request body cap
//	config: rate-limit         one call, then rate_limited
//	config: no-backend         no service configured
//	config: elicitation        multi-round elicitation on a real Temporal dev
//	                           server, with a calls worker
//	config: notes=N            the notes service too (resources), the local
//	                           agent holding N notes
//	config: tasks              the mesh's own contracts, with a real tasks
//	                           service on a fixed clock (prompts)
//
// In requests, {{session}} is the last Mcp-Session-Id the edge issued,
// {{meta}} the per-request _meta of the 2026-07-28 protocol,
// {{meta-elicit}} that _meta declaring form elicitation, and {{state}} the
// last requestState the edge issued (shown as {{state}} in responses), and
// {{tsk-N}} the Nth task id the edge answered (ids are shown so). Default
// Content-Type and Accept headers are added unless the request sets them.
// Responses show the status, the headers a client acts on and the body with
// every JSON message indented; ports, session ids and random keys are
// replaced by placeholders, error ids by err_{{error-id}}.

type archive struct {
	comment string
	files   []archiveFile
}

type archiveFile struct {
	name string
	data string
}

var markerRE = regexp.MustCompile(`(?m)^-- (.+) --$`)

func parseArchive(data string) archive {
	var a archive
	locs := markerRE.FindAllStringSubmatchIndex(data, -1)
	if len(locs) == 0 {
		a.comment = data
		return a
	}
	a.comment = data[:locs[0][0]]
	for i, loc := range locs {
		end := len(data)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		body := data[loc[1]:end]
		body = strings.TrimPrefix(body, "\n")
		a.files = append(a.files, archiveFile{name: data[loc[2]:loc[3]], data: body})
	}
	return a
}

func (a archive) format() string {
	var b strings.Builder
	b.WriteString(a.comment)
	for _, f := range a.files {
		fmt.Fprintf(&b, "-- %s --\n", f.name)
		b.WriteString(f.data)
		if !strings.HasSuffix(f.data, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func TestTranscripts(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("testdata", "transcripts", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no transcripts (%v)", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			a := parseArchive(string(raw))
			tr := newTranscriptRunner(t, a.comment)
			var out []archiveFile
			for _, f := range a.files {
				if !strings.HasSuffix(f.name, " request") {
					continue
				}
				n := strings.TrimSuffix(f.name, " request")
				got := tr.run(t, f.data)
				out = append(out, f, archiveFile{name: n + " response", data: got})
				want, ok := find(a.files, n+" response")
				if *update {
					continue
				}
				if !ok {
					t.Errorf("%s: request %s has no response (run with -update)", path, n)
					continue
				}
				if diff := cmp.Diff(strings.TrimSpace(want), strings.TrimSpace(got)); diff != "" {
					t.Errorf("%s: response %s differs (-want +got); rerun with -update if intended:\n%s", path, n, diff)
				}
			}
			if *update {
				a.files = out
				if err := os.WriteFile(path, []byte(a.format()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func find(files []archiveFile, name string) (string, bool) {
	for _, f := range files {
		if f.name == name {
			return f.data, true
		}
	}
	return "", false
}

type transcriptRunner struct {
	f       *edgetest.Fixture
	iss     *identitytest.Issuer
	session string
	state   string   // the last requestState issued
	replace []string // old, new pairs applied to responses
	ids     []string // the random ids answered, in order
}

func newTranscriptRunner(t *testing.T, comment string) *transcriptRunner {
	tr := &transcriptRunner{}
	var opts []func(*edge.Config)
	var mesh *edgetest.MrtrMesh
	notes, withTasks := -1, false
	for _, line := range strings.Split(comment, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "config: ")
		if !ok {
			continue
		}
		key, val, _ := strings.Cut(v, "=")
		switch key {
		case "read-only":
			opts = append(opts, func(c *edge.Config) { c.ReadOnly = true })
		case "auth":
			tr.iss = identitytest.NewIssuer(t)
			opts = append(opts, func(c *edge.Config) { c.Auth = tr.iss.AuthConfig(t) })
		case "call-timeout":
			d, err := time.ParseDuration(val)
			if err != nil {
				t.Fatal(err)
			}
			opts = append(opts, func(c *edge.Config) { c.CallTimeout = d })
		case "max-body":
			var n int64
			fmt.Sscan(val, &n)
			opts = append(opts, func(c *edge.Config) { c.MCP.MaxBodyBytes = n })
		case "rate-limit":
			opts = append(opts, func(c *edge.Config) { c.RateLimit = edge.RateLimit{PerSecond: 0.001, Burst: 1} })
		case "no-backend":
			opts = append(opts, func(c *edge.Config) { c.Services = nil })
		case "elicitation":
			mesh = edgetest.NewMRTRMesh(t)
			mesh.StartWorker(t)
		case "notes":
			fmt.Sscan(val, &notes)
		case "tasks":
			withTasks = true
		default:
			t.Fatalf("unknown transcript config %q", v)
		}
	}
	configure := func(c *edge.Config) {
		for _, o := range opts {
			o(c)
		}
	}
	switch {
	case mesh != nil:
		tr.f = mesh.Edge(t, configure)
	case notes >= 0:
		tr.f = edgetest.NewNotesFixture(t, configure)
		tr.f.Backend.SeedNotes("local", notes)
	case withTasks:
		tr.f = newTasksFixture(t, configure)
	default:
		tr.f = edgetest.NewFixture(t, configure)
	}
	addr := tr.f.HTTP.Listener.Addr().String()
	tr.replace = []string{addr, "127.0.0.1:PORT"}
	return tr
}

// newTasksFixture serves an edge with the mesh's own contracts whose only
// backend is a real tasks service on a fixed clock.
func newTasksFixture(t *testing.T, configure func(*edge.Config)) *edgetest.Fixture {
	t.Helper()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "tasks.db"))
	st, err := tasksstore.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2030, 1, 2, 9, 30, 0, 0, time.UTC)
	svc := servertest.Start(t, tasks.New(st, tasks.Config{Now: func() time.Time { return now }}).Registration())
	return edgetest.NewFixtureOn(t, testingsvc.New(), svc, func(c *edge.Config) {
		c.Contracts = nil
		c.Services = map[string]string{tasksv1connect.TasksServiceName: svc.URL}
		if configure != nil {
			configure(c)
		}
	})
}

// idRE matches the random ids of the mesh's records in responses.
var idRE = regexp.MustCompile(`\btsk_[0-9a-z]{26}\b`)

var (
	tokenTemplateRE = regexp.MustCompile(`\{\{token ([^ }]+)((?: [^ }]+)*)\}\}`)
	randomKeyRE     = regexp.MustCompile(`mcp-[0-9a-f]{32}`)
	errorIDRE       = regexp.MustCompile(`err_[0-9a-z]{26}`)
	requestStateRE  = regexp.MustCompile(`"requestState":\s*"([A-Za-z0-9_-]+)"`)
)

// run sends one request and renders the response.
func (tr *transcriptRunner) run(t *testing.T, text string) string {
	t.Helper()
	text = strings.ReplaceAll(text, "{{meta-elicit}}", edgetest.ElicitingMeta)
	text = strings.ReplaceAll(text, "{{state}}", tr.state)
	text = strings.ReplaceAll(text, "{{meta}}", edgetest.ModernMeta)
	text = strings.ReplaceAll(text, "{{session}}", tr.session)
	for i, id := range tr.ids {
		text = strings.ReplaceAll(text, fmt.Sprintf("{{tsk-%d}}", i+1), id)
	}
	text = tokenTemplateRE.ReplaceAllStringFunc(text, func(m string) string {
		parts := tokenTemplateRE.FindStringSubmatch(m)
		return tr.iss.Sign(t, jose.RS256, tr.iss.Valid(edgetest.ResourceFor(tr.f.HTTP), parts[1], strings.TrimSpace(parts[2])))
	})
	if strings.Contains(text, "{{expired-token}}") {
		c := tr.iss.Valid(edgetest.ResourceFor(tr.f.HTTP), "alice", "toolmesh:read")
		c.Expiry = time.Now().Add(-time.Hour)
		text = strings.ReplaceAll(text, "{{expired-token}}", tr.iss.Sign(t, jose.RS256, c))
	}
	head, body, _ := strings.Cut(text, "\n\n")
	lines := strings.Split(strings.TrimSpace(head), "\n")
	method, target, _ := strings.Cut(lines[0], " ")
	req, err := http.NewRequest(method, tr.f.HTTP.URL+target, strings.NewReader(strings.TrimSpace(body)))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lines[1:] {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			t.Fatalf("bad header line %q", l)
		}
		if strings.EqualFold(k, "Host") {
			req.Host = strings.TrimSpace(v)
			continue
		}
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if method == http.MethodPost && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	res, err := edgetest.TestClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if sid := res.Header.Get("Mcp-Session-Id"); sid != "" {
		tr.session = sid
	}
	return tr.render(t, res)
}

// shownHeaders are the response headers a transcript records.
var shownHeaders = []string{"Content-Type", "Mcp-Session-Id", "WWW-Authenticate", "Allow", "Access-Control-Allow-Origin"}

func (tr *transcriptRunner) render(t *testing.T, res *http.Response) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s\n", res.StatusCode, http.StatusText(res.StatusCode))
	sort.Strings(shownHeaders)
	for _, h := range shownHeaders {
		if v := res.Header.Get(h); v != "" {
			if h == "Mcp-Session-Id" {
				v = "{{session}}"
			}
			fmt.Fprintf(&b, "%s: %s\n", h, v)
		}
	}
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 0 {
		b.WriteString("\n")
	}
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				b.WriteString("data: " + indent(data) + "\n")
			} else if line != "" {
				b.WriteString(line + "\n")
			}
		}
	} else if len(raw) > 0 {
		b.WriteString(indent(string(raw)) + "\n")
	}
	out := b.String()
	for i := 0; i < len(tr.replace); i += 2 {
		out = strings.ReplaceAll(out, tr.replace[i], tr.replace[i+1])
	}
	out = randomKeyRE.ReplaceAllString(out, "mcp-{{random}}")
	out = errorIDRE.ReplaceAllString(out, "err_{{error-id}}")
	if m := requestStateRE.FindStringSubmatch(out); m != nil {
		tr.state = m[1]
		out = strings.ReplaceAll(out, m[1], "{{state}}")
	}
	if tr.session != "" {
		out = strings.ReplaceAll(out, tr.session, "{{session}}")
	}
	out = idRE.ReplaceAllStringFunc(out, func(id string) string {
		i := slices.Index(tr.ids, id)
		if i < 0 {
			tr.ids = append(tr.ids, id)
			i = len(tr.ids) - 1
		}
		return fmt.Sprintf("{{tsk-%d}}", i+1)
	})
	return out
}

func indent(s string) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, []byte(strings.TrimSpace(s)), "", "  "); err != nil {
		return strings.TrimSpace(s)
	}
	return buf.String()
}
