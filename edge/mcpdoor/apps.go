package mcpdoor

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
)

// MCP Apps (the io.modelcontextprotocol/ui extension, SEP-1865): a tool
// whose contract names a view (the tool option's view) shows its result in
// that view — a self-contained HTML file kept in the contract's assets
// (proto/toolmesh/<domain>/v1/assets/views/<name>.html), served as the
// resource ui://toolmesh/<domain>/<name>. To a client that declares the
// extension (in initialize's capabilities at 2025 versions, in each
// request's client capabilities at 2026-07-28), tools/list gives such a
// tool _meta.ui.resourceUri, and resources/list begins with the views of
// the tools the caller may call through its selection. Any other client
// sees exactly what it saw before views existed. A view is not a secret:
// resources/read serves it to anyone, as skills are.
//
// A view calls tools only through its host, as the host's user, so each
// call takes the same pipeline (grants, guardrails, limits, audit) as the
// same call from the model: nothing here gives a view more.

// ExtensionUI is the MCP Apps extension's identifier.
const ExtensionUI = "io.modelcontextprotocol/ui"

// MIMEApp is the MIME type of a view.
const MIMEApp = "text/html;profile=mcp-app"

// appView is one view as the door serves it.
type appView struct {
	res  *mcp.Resource
	html string
	// tools show their results in it, sorted by name.
	tools []*tool
}

// appMeta is every view's resource _meta: a restrictive content security
// policy (no domain of any kind: the file carries its scripts and styles
// inline) and no permissions (camera, microphone, geolocation, clipboard).
func appMeta() mcp.Meta {
	return mcp.Meta{"ui": map[string]any{
		"csp": map[string]any{
			"connectDomains":  []string{},
			"resourceDomains": []string{},
			"frameDomains":    []string{},
			"baseUriDomains":  []string{},
		},
		"permissions":   map[string]any{},
		"prefersBorder": true,
	}}
}

// appFeature serves the MCP Apps views of the tools, sorted by URI.
type appFeature struct {
	apps []*appView
}

// loadApps reads the view of every tool that names one, and gives each
// such tool the variant of its description that points at it. A view the
// assets lack stops the edge at start.
func loadApps(sorted []*tool, assets fs.FS) ([]*appView, error) {
	var apps []*appView
	byURI := map[string]*appView{}
	for _, t := range sorted {
		v := t.catalog.View
		if v == nil {
			continue
		}
		a := byURI[v.URI]
		if a == nil {
			if assets == nil {
				return nil, fmt.Errorf("edge: tool %s: view %s: the edge has no assets", t.catalog.Name, v.URI)
			}
			b, err := fs.ReadFile(assets, v.Asset)
			if err != nil {
				return nil, fmt.Errorf("edge: tool %s: view %s: %w", t.catalog.Name, v.URI, err)
			}
			a = &appView{html: string(b), res: &mcp.Resource{
				URI: v.URI, Name: v.Name, MIMEType: MIMEApp, Size: int64(len(b)), Meta: appMeta(),
				Title:       t.catalog.Title + " (view)",
				Description: "An MCP Apps view of the result of " + t.catalog.Name + ".",
			}}
			byURI[v.URI] = a
			apps = append(apps, a)
		}
		a.tools = append(a.tools, t)
		m := *t.mcp
		m.Meta = mcp.Meta{"ui": map[string]any{"resourceUri": v.URI}}
		t.app = &m
	}
	sort.Slice(apps, func(i, j int) bool { return apps[i].res.URI < apps[j].res.URI })
	return apps, nil
}

// addApps serves each view as a resource.
func (af *appFeature) addApps(server *mcp.Server) {
	for _, a := range af.apps {
		server.AddResource(a.res, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: a.res.URI, MIMEType: MIMEApp, Text: a.html, Meta: a.res.Meta}}}, nil
		})
	}
}

// appsVisible are the views p reaches through r: those of the tools it
// may call there.
func (af *appFeature) appsVisible(p *identity.Principal, r *reach) []*mcp.Resource {
	var out []*mcp.Resource
	for _, a := range af.apps {
		if slices.ContainsFunc(a.tools, func(t *tool) bool {
			ok, _ := p.MayCall(t.catalog)
			return ok && r.has(t.catalog.Name)
		}) {
			out = append(out, a.res)
		}
	}
	return out
}

// declaresUI reports whether the client of req declared the extension with
// the MIME type of the door's views.
func declaresUI(req mcp.Request) bool {
	r, ok := req.(interface {
		ClientCapabilities() *mcp.ClientCapabilities
	})
	if !ok {
		return false
	}
	caps := r.ClientCapabilities()
	if caps == nil {
		return false
	}
	ext, ok := caps.Extensions[ExtensionUI].(map[string]any)
	if !ok {
		return false
	}
	types, _ := ext["mimeTypes"].([]any)
	return slices.Contains(types, any(MIMEApp))
}
