package mcpdoor_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/port"
)

// Server cards and the AI catalog (edge/mcpdoor/servercard.go,
// edge/catalog.go): what a client reads before it connects, fetched as a
// browser or crawler would.

// cardSchema is the Server Card schema kept in testdata.
func cardSchema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile("testdata/server-card.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	r, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// get fetches url with headers, returning the response and its body.
func get(t *testing.T, method, url string, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, b
}

// cardOf checks a card response: the media type, CORS, caching, and the
// schema; it returns the card.
func cardOf(t *testing.T, schema *jsonschema.Resolved, res *http.Response, body []byte) map[string]any {
	t.Helper()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	for k, want := range map[string]string{
		"Content-Type":                  "application/mcp-server-card+json",
		"Access-Control-Allow-Origin":   "*",
		"Access-Control-Expose-Headers": "ETag",
		"Cache-Control":                 "public, max-age=3600",
	} {
		if got := res.Header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if res.Header.Get("ETag") == "" {
		t.Error("no ETag")
	}
	var card map[string]any
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if err := schema.Validate(card); err != nil {
		t.Fatalf("the card breaks the Server Card schema: %v\n%s", err, body)
	}
	if d, _ := card["description"].(string); utf8.RuneCountInString(d) > 100 {
		t.Errorf("description has %d characters: %q", utf8.RuneCountInString(d), d)
	}
	for _, k := range []string{"tools", "resources", "prompts", "packages"} {
		if _, ok := card[k]; ok {
			t.Errorf("the card lists %s; a card is connectivity only", k)
		}
	}
	return card
}

func remoteURL(card map[string]any) string {
	remotes, _ := card["remotes"].([]any)
	if len(remotes) != 1 {
		return ""
	}
	r, _ := remotes[0].(map[string]any)
	u, _ := r["url"].(string)
	return u
}

func TestServerCardNextToEveryEndpoint(t *testing.T) {
	f := productEdge(t, nil)
	schema := cardSchema(t)
	base := strings.TrimSuffix(f.URL, "/mcp")

	res, body := get(t, http.MethodGet, f.URL+"/server-card", map[string]string{"Accept": "application/mcp-server-card+json"})
	card := cardOf(t, schema, res, body)
	if card["name"] != "io.github.toolmesh/toolmesh" || card["version"] != "dev" {
		t.Errorf("name %v version %v", card["name"], card["version"])
	}
	if got := remoteURL(card); got != f.URL {
		t.Errorf("remote URL %q, want the endpoint %q", got, f.URL)
	}
	if strings.Contains(string(body), "tasks_create") {
		t.Errorf("the card names a tool: %s", body)
	}

	// Revalidation: the same ETag is not modified.
	res2, body2 := get(t, http.MethodGet, f.URL+"/server-card", map[string]string{"If-None-Match": res.Header.Get("ETag")})
	if res2.StatusCode != http.StatusNotModified || len(body2) != 0 {
		t.Errorf("If-None-Match with its ETag: status %d, %d bytes; want 304 and none", res2.StatusCode, len(body2))
	}
	// A browser's preflight.
	pre, _ := get(t, http.MethodOptions, f.URL+"/server-card", map[string]string{"Origin": "https://elsewhere.example", "Access-Control-Request-Method": "GET"})
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != "*" ||
		pre.Header.Get("Access-Control-Allow-Headers") != "Content-Type, If-None-Match" || pre.Header.Get("Access-Control-Allow-Methods") != "GET" {
		t.Errorf("preflight: %d %v", pre.StatusCode, pre.Header)
	}
	if res, _ := get(t, http.MethodPost, f.URL+"/server-card", nil); res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: status %d, want 405", res.StatusCode)
	}

	// Each toolset's path has its own card, naming its endpoint.
	for _, ts := range f.Edge.Registry().Toolsets() {
		res, body := get(t, http.MethodGet, base+edge.PathToolsets+ts.Name+"/server-card", nil)
		card := cardOf(t, schema, res, body)
		if want := base + edge.PathToolsets + ts.Name; remoteURL(card) != want {
			t.Errorf("toolset %s: remote URL %q, want %q", ts.Name, remoteURL(card), want)
		}
		if card["name"] != "io.github.toolmesh/toolmesh-"+ts.Name {
			t.Errorf("toolset %s: name %v", ts.Name, card["name"])
		}
	}
	if res, body := get(t, http.MethodGet, base+edge.PathToolsets+"nosuch/server-card", nil); res.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown toolset's card: status %d %s, want 404", res.StatusCode, body)
	}
	// A foreign Host is refused, as on /mcp.
	req, _ := http.NewRequest(http.MethodGet, f.URL+"/server-card", nil)
	req.Host = "evil.example"
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Errorf("foreign Host: %v %v, want 403", res, err)
	}
}

func TestServerCardNamesThePublicURL(t *testing.T) {
	f := productEdge(t, func(c *edge.Config) { c.MCP.PublicURL = "https://mcp.example.com/" })
	res, body := get(t, http.MethodGet, f.URL+"/server-card", nil)
	if got := remoteURL(cardOf(t, cardSchema(t), res, body)); got != "https://mcp.example.com/mcp" {
		t.Errorf("remote URL %q, want the public URL's endpoint", got)
	}
	res, body = get(t, http.MethodGet, strings.TrimSuffix(f.URL, "/mcp")+edge.PathAICatalog, nil)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"url":"https://mcp.example.com/mcp/server-card"`) {
		t.Errorf("catalog: %d %s", res.StatusCode, body)
	}
}

// agentCards is an A2A door's catalog, as a test gives it.
type agentCards []port.CatalogEntry

func (a agentCards) CatalogEntries(context.Context, *http.Request) ([]port.CatalogEntry, error) {
	return a, nil
}

func TestAICatalogListsTheServerAndTheAgents(t *testing.T) {
	f := productEdge(t, nil)
	agent := port.CatalogEntry{Identifier: "urn:air:127.0.0.1:a2a:bob", Type: "application/a2a-agent-card+json", URL: "http://127.0.0.1:7300/a2a/agents/bob/.well-known/agent-card.json"}
	f.Edge.AddCatalog(agentCards{agent})
	base := strings.TrimSuffix(f.URL, "/mcp")
	res, body := get(t, http.MethodGet, base+edge.PathAICatalog, nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/ai-catalog+json" ||
		res.Header.Get("Access-Control-Allow-Origin") != "*" || res.Header.Get("ETag") == "" {
		t.Fatalf("catalog: %d %v %s", res.StatusCode, res.Header, body)
	}
	var doc struct {
		SpecVersion string              `json:"specVersion"`
		Entries     []port.CatalogEntry `json:"entries"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SpecVersion != edge.AICatalogSpecVersion {
		t.Errorf("specVersion %q", doc.SpecVersion)
	}
	want := 1 + len(f.Edge.Registry().Toolsets()) + 1
	if len(doc.Entries) != want {
		t.Fatalf("%d entries, want the server, its %d toolsets and the agent: %s", len(doc.Entries), want-2, body)
	}
	if doc.Entries[0].URL != f.URL+"/server-card" || doc.Entries[0].Type != "application/mcp-server-card+json" {
		t.Errorf("first entry %+v, want the server's card", doc.Entries[0])
	}
	if doc.Entries[len(doc.Entries)-1] != agent {
		t.Errorf("last entry %+v, want the agent's card", doc.Entries[len(doc.Entries)-1])
	}
	// Every MCP entry is a card that is served.
	for _, e := range doc.Entries[:len(doc.Entries)-1] {
		if res, _ := get(t, http.MethodGet, e.URL, nil); res.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d", e.URL, res.StatusCode)
		}
	}
}
