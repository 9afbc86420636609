//lint:file-ignore SA1019 the test clients answer roots requests, deprecated from 2026-07-28 on (SEP-2577) but still served

package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// projects_create without path or git_url, against `toolmesh up` (whose
// project base is the directory it was started in), from the go-sdk client
// over a 2025-11-25 session and at 2026-07-28: the client's roots are asked
// once; its first root, inside the base, becomes the project's code root,
// and the project is created once; a root outside the base is refused with
// invalid_argument naming the base, nothing created; a call that gives
// git_url is not asked; a client without roots (or with none to give) gets
// the oneof's invalid_argument, the result's note saying why.
func TestProjectsCreateOffersTheClientsRoots(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	url := m.Link(t, linkMCP)
	base, err := filepath.EvalSymlinks(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()

	// connect is a go-sdk client at version with roots, declaring the
	// capability when declare; asked counts the times it gave them.
	connect := func(t *testing.T, version string, declare bool, roots ...string) (*mcp.ClientSession, *atomic.Int32) {
		t.Helper()
		asked := &atomic.Int32{}
		opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
		if declare {
			opts.Capabilities.RootsV2 = &mcp.RootCapabilities{}
		}
		c := mcp.NewClient(&mcp.Implementation{Name: "roots-e2e", Version: "1"}, opts)
		for i, r := range roots {
			c.AddRoots(&mcp.Root{URI: "file://" + r, Name: "root" + string(rune('a'+i))})
		}
		s, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rootsCounter{asked}}}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, asked
	}
	// projects are the names and paths of the projects.
	projects := func(t *testing.T, s *mcp.ClientSession) map[string]string {
		t.Helper()
		env := callTool(t, s, "projects_list", map[string]any{"limit": 200})
		var d struct {
			Projects []struct{ Name, Path string } `json:"projects"`
		}
		if err := json.Unmarshal(env.Data, &d); err != nil {
			t.Fatalf("projects_list: %+v: %v", env, err)
		}
		out := map[string]string{}
		for _, p := range d.Projects {
			out[p.Name] = p.Path
		}
		return out
	}

	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		era := strings.ReplaceAll(version, "-", "")
		t.Run(version+"/root inside the base", func(t *testing.T) {
			dir := filepath.Join(base, "code-"+era)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			s, asked := connect(t, version, true, dir, outside)
			env := callTool(t, s, "projects_create", map[string]any{"name": "rooted-" + era})
			if env.Status != "ok" || !strings.Contains(string(env.Data), `"path":"code-`+era+`"`) {
				t.Fatalf("projects_create = %+v, want the project at code-%s", env, era)
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("the client's roots were asked %d times, want once", n)
			}
			if got := projects(t, s); got["rooted-"+era] != "code-"+era {
				t.Errorf("projects = %v, want rooted-%s at code-%s", got, era, era)
			}
		})
		t.Run(version+"/root outside the base", func(t *testing.T) {
			s, asked := connect(t, version, true, outside)
			env := callTool(t, s, "projects_create", map[string]any{"name": "astray-" + era})
			if env.DomainCode != "invalid_argument" || !strings.Contains(env.Message, "outside the project base "+base) {
				t.Errorf("projects_create = %+v, want invalid_argument naming the base %s", env, base)
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("the client's roots were asked %d times, want once", n)
			}
			if got := projects(t, s); got["astray-"+era] != "" {
				t.Errorf("projects = %v, want no astray-%s", got, era)
			}
		})
		t.Run(version+"/git_url given", func(t *testing.T) {
			// The call chose git_url: the roots are not asked for, and
			// the clone's own answer comes back.
			s, asked := connect(t, version, true, outside)
			env := callTool(t, s, "projects_create", map[string]any{"name": "cloned-" + era, "git_url": "https://127.0.0.1:1/x.git"})
			if n := asked.Load(); n != 0 || env.Status == "ok" || strings.Contains(env.Message, "project base") {
				t.Errorf("projects_create = %+v after asking the roots %d times; want the clone refused, roots not asked", env, n)
			}
		})
		// A client that cannot answer, and one with no root to give, get
		// the oneof's error, the note saying why.
		for _, c := range []struct {
			name    string
			declare bool
			note    string
		}{
			{"no roots", false, "The client offers no roots, so give path or git_url."},
			{"empty roots", true, "The client's roots answer was refused (the client has no roots), so give path or git_url."},
		} {
			t.Run(version+"/"+c.name, func(t *testing.T) {
				s, _ := connect(t, version, c.declare)
				name := "rootless-" + era + strings.ReplaceAll(c.name, " ", "")
				res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "projects_create", Arguments: map[string]any{"name": name}})
				if err != nil {
					t.Fatal(err)
				}
				raw, _ := json.Marshal(res.StructuredContent)
				var env struct {
					DomainCode string   `json:"domain_code"`
					Message    string   `json:"message"`
					Notes      []string `json:"notes"`
				}
				_ = json.Unmarshal(raw, &env)
				if env.DomainCode != "invalid_argument" || !strings.Contains(env.Message, "one of path, git_url must be set") || !slices.Equal(env.Notes, []string{c.note}) {
					t.Errorf("projects_create = %s, want invalid_argument asking for path or git_url, noting %q", raw, c.note)
				}
				if got := projects(t, s); got[name] != "" {
					t.Errorf("projects = %v, want no %s", got, name)
				}
			})
		}
	}
}

// rootsCounter counts the requests that carry the client's roots: its
// answer to roots/list (2025) or a tools/call's input response (2026-07-28).
type rootsCounter struct{ n *atomic.Int32 }

func (c rootsCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		if bytes.Contains(body, []byte(`"roots":[`)) {
			c.n.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	return http.DefaultTransport.RoundTrip(r)
}
