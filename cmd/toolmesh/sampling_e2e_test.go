//lint:file-ignore SA1019 the test clients answer sampling requests, deprecated from 2026-07-28 on (SEP-2577) but still served

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
)

// recordingSearXNG is a SearXNG instance that records the queries it is asked
// and answers each with one result.
type recordingSearXNG struct {
	mu      sync.Mutex
	queries []string
}

func (f *recordingSearXNG) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query().Get("q")
	f.mu.Lock()
	f.queries = append(f.queries, q)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": []any{map[string]any{
		"title": "About " + q, "url": "https://example.org/" + strings.ReplaceAll(q, " ", "-"), "content": "A page about " + q + ".",
	}}})
}

// take returns the queries asked since the last take.
func (f *recordingSearXNG) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queries
	f.queries = nil
	slices.Sort(q)
	return q
}

// researched is the part of search_deep_research's result the tests read.
type researched struct {
	Status string `json:"status"`
	Data   struct {
		Queries []struct {
			Query string `json:"query"`
		} `json:"queries"`
	} `json:"data"`
	Notes []string `json:"notes"`
}

func (r researched) queries() []string {
	var out []string
	for _, q := range r.Data.Queries {
		out = append(out, q.Query)
	}
	slices.Sort(out)
	return out
}

// search_deep_research without queries, against `toolmesh up` with a fake
// SearXNG: the client's model is asked once for the queries, and the
// queries it writes are the ones searched and named in the result — for the
// official TypeScript SDK over a 2025-11-25 session and the go-sdk client at
// 2026-07-28. A model answer that breaks the queries' rules (more than 10)
// is refused and the service's own derivation runs, the result saying so;
// a client without sampling gets that fallback at once, said the same way.
func TestDeepResearchAsksTheClientsModelForItsQueries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the mesh and Node")
	}
	searx := &recordingSearXNG{}
	fake := httptest.NewServer(searx)
	t.Cleanup(fake.Close)
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal, "TOOLMESH_SEARCH_PROVIDER=searxng", "TOOLMESH_SEARCH_SEARXNG_URL="+fake.URL, "TOOLMESH_SEARCH_EGRESS_ALLOW=127.0.0.1")
	url := m.Link(t, linkMCP)

	t.Run("TypeScript SDK 2025-11-25", func(t *testing.T) {
		dir := nodetest.Install(t, filepath.Join("testdata", "tsclient"))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "node", "sampling.mjs", url, `tide tables\nmoon gravity tides`)
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node sampling.mjs: %v\n%s", err, stderr.String())
		}
		var rep struct {
			Prompts []string
			Result  researched
			Error   string
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			t.Fatalf("report %q: %v", out, err)
		}
		if rep.Error != "" || rep.Result.Status != "ok" {
			t.Fatalf("report = %s, want an ok result", out)
		}
		if len(rep.Prompts) != 1 || !strings.Contains(rep.Prompts[0], "how do tides work?") {
			t.Errorf("the model was asked %q, want once, with the question", rep.Prompts)
		}
		want := []string{"moon gravity tides", "tide tables"}
		if got := searx.take(); !slices.Equal(got, want) {
			t.Errorf("SearXNG was asked %q, want the model's queries %q", got, want)
		}
		if got := rep.Result.queries(); !slices.Equal(got, want) || len(rep.Result.Notes) != 0 {
			t.Errorf("the result names %q with notes %q, want %q and no notes", got, rep.Result.Notes, want)
		}
	})

	// go-sdk at 2026-07-28: the model's queries, a model that breaks the
	// rules, and a client without sampling.
	call := func(t *testing.T, answer string) (researched, int) {
		t.Helper()
		var asked int
		opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
		if answer != "" {
			opts.Capabilities.Sampling = &mcp.SamplingCapabilities{}
			opts.CreateMessageHandler = func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				asked++
				return &mcp.CreateMessageResult{Role: "assistant", Model: "go-model", Content: &mcp.TextContent{Text: answer}}, nil
			}
		}
		s, err := mcp.NewClient(&mcp.Implementation{Name: "sampling-e2e", Version: "1"}, opts).
			Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		res, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "search_deep_research", Arguments: map[string]any{"question": "how do tides work?"}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var r researched
		if err := json.Unmarshal(raw, &r); err != nil || r.Status != "ok" {
			t.Fatalf("result = %s, want ok", raw)
		}
		return r, asked
	}
	t.Run("go-sdk 2026-07-28", func(t *testing.T) {
		r, asked := call(t, "- neap tides\n- spring tides")
		want := []string{"neap tides", "spring tides"}
		if got := searx.take(); asked != 1 || !slices.Equal(got, want) || !slices.Equal(r.queries(), want) || len(r.Notes) != 0 {
			t.Errorf("asked the model %d times, searched %q, result names %q with notes %q; want once, %q, no notes", asked, got, r.queries(), r.Notes, want)
		}
	})
	t.Run("model breaks the rules", func(t *testing.T) {
		var lines []string
		for i := range 12 {
			lines = append(lines, "tides question "+string(rune('a'+i)))
		}
		r, asked := call(t, strings.Join(lines, "\n"))
		got := searx.take()
		if asked != 1 || len(got) == 0 || slices.Contains(got, "tides question a") {
			t.Errorf("asked the model %d times, searched %q; want once, and the service's own queries", asked, got)
		}
		if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "refused") || !strings.Contains(r.Notes[0], "the queries were derived from the question") {
			t.Errorf("notes = %q, want the refusal and the fallback said", r.Notes)
		}
	})
	t.Run("no sampling", func(t *testing.T) {
		r, _ := call(t, "")
		if got := searx.take(); len(got) == 0 {
			t.Errorf("searched nothing, want the service's own queries")
		}
		if want := "The client offers no sampling, so the queries were derived from the question."; !slices.Equal(r.Notes, []string{want}) {
			t.Errorf("notes = %q, want %q", r.Notes, want)
		}
	})
}
