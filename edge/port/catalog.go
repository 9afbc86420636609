package port

import (
	"context"
	"net/http"
)

// CatalogEntry is one entry of the edge's AI catalog
// (/.well-known/ai-catalog.json): a card a client can fetch.
type CatalogEntry struct {
	// Identifier names what the card describes, as a URN
	// (urn:air:<host>:<namespace>:<name>).
	Identifier string `json:"identifier"`
	// Type is the card's media type.
	Type string `json:"type"`
	// URL is where the card is served.
	URL string `json:"url"`
}

// CardCatalog lists cards for the AI catalog: a door's, beside the MCP door's.
type CardCatalog interface {
	// CatalogEntries are the cards, for the catalog r asked for; an error
	// leaves them out of the catalog (which says so in the log).
	CatalogEntries(ctx context.Context, r *http.Request) ([]CatalogEntry, error)
}
