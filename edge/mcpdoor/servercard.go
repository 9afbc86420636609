package mcpdoor

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/port"
)

// Server cards (the Server Card extension, SEP-2127): a static JSON
// document next to each MCP endpoint the door serves — /mcp/server-card,
// and /mcp/x/<toolset>/server-card for each toolset's path — that tells a
// client how to connect before it connects: the server's name, version
// and a short description, and its remote (the endpoint's public URL, the
// protocol versions, the optional selection header). It is connectivity
// only: no tools, resources or prompts (a client lists those once
// connected, by its caller's grants), nothing secret, no internal address.
// It is public like the OAuth metadata: anyone on the Host the edge
// answers to may read it.

// Server card constants.
const (
	// ServerCardPath follows an MCP endpoint's path.
	ServerCardPath = "/server-card"
	// ServerCardMediaType is the card's media type.
	ServerCardMediaType = "application/mcp-server-card+json"
	// ServerCardSchema is the $schema every card names.
	ServerCardSchema = "https://static.modelcontextprotocol.io/schemas/v1/server-card.schema.json"
	// serverName is the server's reverse-DNS name; a toolset's endpoint
	// is serverName-<toolset>.
	serverName  = "io.github.toolmesh/toolmesh"
	serverTitle = "toolmesh"
	// maxCardDescription is the schema's bound on description.
	maxCardDescription = 100
)

// serverCard is a card as the schema writes it.
type serverCard struct {
	Schema      string       `json:"$schema"`
	Name        string       `json:"name"`
	Version     string       `json:"version"`
	Title       string       `json:"title"`
	Description string       `json:"description"`
	Remotes     []cardRemote `json:"remotes"`
}

type cardRemote struct {
	Type                      string       `json:"type"`
	URL                       string       `json:"url"`
	Headers                   []cardHeader `json:"headers,omitempty"`
	SupportedProtocolVersions []string     `json:"supportedProtocolVersions"`
}

type cardHeader struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	IsRequired  bool   `json:"isRequired"`
	IsSecret    bool   `json:"isSecret"`
	Format      string `json:"format"`
}

// ServerCardHandler serves the cards: the whole server's at
// /mcp/server-card, a toolset's where the path value "toolset" names one.
func (d *Door) ServerCardHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !d.cfg.Guard.HostAllowed(r) {
			d.cfg.Guard.RejectHost(w, r)
			return
		}
		doc, ok := d.serverCard(d.publicBase(r), r.PathValue("toolset"))
		if !ok {
			httpguard.WriteRPCError(w, http.StatusNotFound, nil, httpguard.CodeInvalidRequest,
				fmt.Sprintf("no toolset %q is served here; the toolsets are %s", httpguard.Truncate(r.PathValue("toolset"), 64), d.toolsets.names), nil)
			return
		}
		httpguard.ServeDocument(w, r, doc)
	})
}

// serverCard is the card of the endpoint at base for toolset ("" is the
// whole server's); ok is false for a toolset the door lacks.
func (d *Door) serverCard(base, toolset string) (httpguard.Document, bool) {
	card := serverCard{Schema: ServerCardSchema, Name: serverName, Version: d.cfg.Version, Title: serverTitle,
		Description: fmt.Sprintf("Agent-platform services as MCP tools, in %d toolsets; select them by path or header.", len(d.toolsets.list))}
	remote := cardRemote{Type: "streamable-http", URL: base + "/mcp", SupportedProtocolVersions: ProtocolVersions}
	if toolset == "" {
		remote.Headers = []cardHeader{{Name: HeaderToolsets, Format: "string",
			Description: "The toolsets this client uses, comma-separated (all, default, dynamic, toolset and tool names); all when absent."}}
	} else {
		ts := d.toolsets.byName[toolset]
		if ts == nil {
			return httpguard.Document{}, false
		}
		card.Name += "-" + ts.Name
		card.Title = serverTitle + ": " + ts.Name
		card.Description = clip(ts.Description, maxCardDescription)
		remote.URL = base + PathToolsets + ts.Name
	}
	card.Remotes = []cardRemote{remote}
	b, err := json.Marshal(card)
	if err != nil {
		panic(err) // plain strings and slices
	}
	return httpguard.NewDocument(ServerCardMediaType, b), true
}

// CatalogEntries are the door's endpoints as AI catalog entries: the whole
// server's card, then each toolset's.
func (d *Door) CatalogEntries(r *http.Request) []port.CatalogEntry {
	base := d.publicBase(r)
	host := "localhost"
	if u, err := url.Parse(base); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	_, name, _ := strings.Cut(serverName, "/")
	out := []port.CatalogEntry{{Identifier: "urn:air:" + host + ":mcp:" + name, Type: ServerCardMediaType, URL: base + "/mcp" + ServerCardPath}}
	for _, ts := range d.toolsets.list {
		out = append(out, port.CatalogEntry{Identifier: "urn:air:" + host + ":mcp:" + name + "-" + ts.Name, Type: ServerCardMediaType,
			URL: base + PathToolsets + ts.Name + ServerCardPath})
	}
	return out
}

// publicBase is the edge's base URL as clients reach it: the configured
// one, else the one r reached (its Host passed the guard).
func (d *Door) publicBase(r *http.Request) string {
	if d.cfg.PublicURL != "" {
		return strings.TrimRight(d.cfg.PublicURL, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// clip is s cut to at most n characters, at a word boundary, with an
// ellipsis when cut.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)[:n-1]
	cut := string(r)
	if i := strings.LastIndexByte(cut, ' '); i > n/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,;:") + "…"
}
