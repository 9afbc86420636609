package a2adoor_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/port"
)

// TestAICatalogListsEveryAgentTheA2ADoorServes: an edge with the A2A door
// lists in its AI catalog the card of every agent the door serves, page
// after page, each a card the door serves.
func TestAICatalogListsEveryAgentTheA2ADoorServes(t *testing.T) {
	a := newA2AFixture(t, nil)
	mcpSrv := httptest.NewServer(a.edge.Handler())
	t.Cleanup(mcpSrv.Close)
	res, body := getDoc(t, mcpSrv.URL+edge.PathAICatalog)
	var doc struct {
		Entries []port.CatalogEntry `json:"entries"`
	}
	if err := json.Unmarshal(body, &doc); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("catalog: %d %s %v", res.StatusCode, body, err)
	}
	var agents []port.CatalogEntry
	for _, e := range doc.Entries {
		if e.Type == "application/a2a-agent-card+json" {
			agents = append(agents, e)
		}
	}
	if len(agents) != 250 {
		t.Fatalf("%d agent cards, want the 250 the door serves", len(agents))
	}
	host := strings.TrimPrefix(a.base, "http://")
	host = host[:strings.LastIndexByte(host, ':')]
	want := port.CatalogEntry{Identifier: "urn:air:" + host + ":a2a:bob", Type: "application/a2a-agent-card+json", URL: a.base + "/a2a/agents/bob/.well-known/agent-card.json"}
	if agents[0] != want {
		t.Errorf("first agent %+v, want %+v", agents[0], want)
	}
	if res, body := getDoc(t, agents[0].URL); res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"Bob"`) {
		t.Errorf("bob's card: %d %s", res.StatusCode, body)
	}
}

// getDoc GETs url and reads the body.
func getDoc(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	res, err := http.Get(url)
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
