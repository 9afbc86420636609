package edge

import (
	"encoding/json"
	"net/http"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/port"
)

// The AI catalog (/.well-known/ai-catalog.json) is the domain-level index
// of what the edge's host serves to agents: the MCP server's card, each
// toolset endpoint's card, and — when the A2A door runs — the card of
// every agent it serves. A client that knows only the host finds every
// card from it. It is public, like the cards it lists.

// AI catalog constants.
const (
	// PathAICatalog is where the catalog is served.
	PathAICatalog = "/.well-known/ai-catalog.json"
	// AICatalogMediaType is its media type.
	AICatalogMediaType = "application/ai-catalog+json"
	// AICatalogSpecVersion is the catalog format's version the edge
	// writes: the one the MCP discovery document and the AI Catalog
	// examples use ("1.0"), which MCP clients doing domain discovery read
	// (docs/connecting.md#the-ai-catalog).
	AICatalogSpecVersion = "1.0"
	catalogCacheControl  = "public, max-age=60"
)

// aiCatalog is the catalog document.
type aiCatalog struct {
	SpecVersion string              `json:"specVersion"`
	Host        catalogHost         `json:"host"`
	Entries     []port.CatalogEntry `json:"entries"`
}

type catalogHost struct {
	DisplayName string `json:"displayName"`
}

// AddCatalog lists c's cards in the AI catalog too (the A2A door's
// agents). Call it before the edge serves.
func (e *Edge) AddCatalog(c port.CardCatalog) {
	e.catalogMu.Lock()
	defer e.catalogMu.Unlock()
	e.catalogs = append(e.catalogs, c)
}

// serveCatalog answers the AI catalog: the MCP door's cards, then each
// added catalog's. A catalog that fails is left out (and logged) rather
// than failing the whole document.
func (e *Edge) serveCatalog(w http.ResponseWriter, r *http.Request) {
	if !e.guard.HostAllowed(r) {
		e.guard.RejectHost(w, r)
		return
	}
	doc := aiCatalog{SpecVersion: AICatalogSpecVersion, Host: catalogHost{DisplayName: "toolmesh"}, Entries: e.mcp.CatalogEntries(r)}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		e.catalogMu.Lock()
		catalogs := e.catalogs
		e.catalogMu.Unlock()
		for _, c := range catalogs {
			entries, err := c.CatalogEntries(r.Context(), r)
			if err != nil {
				e.log.WarnContext(r.Context(), "edge.catalog_incomplete", "error", err)
				continue
			}
			doc.Entries = append(doc.Entries, entries...)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		panic(err) // strings only
	}
	d := httpguard.NewDocument(AICatalogMediaType, b)
	// Agents come and go: a reader revalidates within a minute.
	d.CacheControl = catalogCacheControl
	httpguard.ServeDocument(w, r, d)
}
