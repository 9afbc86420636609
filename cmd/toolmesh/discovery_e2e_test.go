package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// fetchDoc fetches url and returns the response and its body.
func fetchDoc(t *testing.T, url string, h map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
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

// TestDiscoveryDocumentsOfTheMesh: against the processes `toolmesh up`
// runs, the MCP endpoint's server card is valid against the Server Card
// schema and names the endpoint, and the host's AI catalog lists the
// server's card and the card of the mesh's agent, each served.
func TestDiscoveryDocumentsOfTheMesh(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	b, err := os.ReadFile("../../edge/mcpdoor/testdata/server-card.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema jsonschema.Schema
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	resolved, err := schema.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	endpoint := m.Link(t, linkMCP)

	res, body := fetchDoc(t, endpoint+"/server-card", map[string]string{"Accept": "application/mcp-server-card+json"})
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/mcp-server-card+json" || res.Header.Get("ETag") == "" {
		t.Fatalf("server card: %d %v %s", res.StatusCode, res.Header, body)
	}
	var card map[string]any
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if err := resolved.Validate(card); err != nil {
		t.Fatalf("the card breaks the schema: %v\n%s", err, body)
	}
	if !strings.Contains(string(body), `"url":"`+endpoint+`"`) {
		t.Errorf("the card does not name the endpoint %s: %s", endpoint, body)
	}

	base := strings.TrimSuffix(endpoint, "/mcp")
	res, body = fetchDoc(t, base+"/.well-known/ai-catalog.json", nil)
	var catalog struct {
		SpecVersion string `json:"specVersion"`
		Entries     []struct{ Identifier, Type, URL string }
	}
	if err := json.Unmarshal(body, &catalog); err != nil || res.StatusCode != http.StatusOK || catalog.SpecVersion != "1.0" {
		t.Fatalf("catalog: %d %s %v", res.StatusCode, body, err)
	}
	var server, agent string
	for _, e := range catalog.Entries {
		switch {
		case e.Type == "application/mcp-server-card+json" && strings.HasSuffix(e.Identifier, ":mcp:toolmesh"):
			server = e.URL
		case e.Type == "application/a2a-agent-card+json" && strings.HasSuffix(e.Identifier, ":a2a:local"):
			agent = e.URL
		}
	}
	if server != endpoint+"/server-card" || agent == "" {
		t.Fatalf("catalog lists server %q and agent local %q, want both: %s\n%s", server, agent, body, tail(m.Stderr()))
	}
	if res, body := fetchDoc(t, agent, nil); res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name":"local"`) {
		t.Errorf("agent local's card: %d %s", res.StatusCode, body)
	}
}
