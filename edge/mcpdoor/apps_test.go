package mcpdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/assets"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// MCP Apps (edge/mcpdoor/apps.go): the views the contracts name, served
// only to clients that declare the extension.

const (
	extUI   = "io.modelcontextprotocol/ui"
	mimeApp = "text/html;profile=mcp-app"
)

// uiCaps declares MCP Apps as a client does.
func uiCaps() *mcp.ClientCapabilities {
	c := &mcp.ClientCapabilities{}
	c.AddExtension(extUI, map[string]any{"mimeTypes": []string{mimeApp}})
	return c
}

// withoutViews are the product contracts with every tool's view option
// cleared: the mesh as it was before views existed.
func withoutViews(t *testing.T) []protoreflect.ServiceDescriptor {
	t.Helper()
	files := map[string]protoreflect.FileDescriptor{}
	var out []protoreflect.ServiceDescriptor
	for _, sd := range toolcatalog.Contracts() {
		fd := sd.ParentFile()
		nf, ok := files[fd.Path()]
		if !ok {
			fdp := protodesc.ToFileDescriptorProto(fd)
			for _, s := range fdp.GetService() {
				for _, m := range s.GetMethod() {
					opts := m.GetOptions()
					if opts == nil || !proto.HasExtension(opts, toolv1.E_Tool) {
						continue
					}
					tool := proto.Clone(proto.GetExtension(opts, toolv1.E_Tool).(*toolv1.Tool)).(*toolv1.Tool)
					tool.View = ""
					opts = proto.Clone(opts).(*descriptorpb.MethodOptions)
					proto.SetExtension(opts, toolv1.E_Tool, tool)
					m.Options = opts
				}
			}
			var err error
			if nf, err = protodesc.NewFile(fdp, protoregistry.GlobalFiles); err != nil {
				t.Fatalf("rebuild %s: %v", fd.Path(), err)
			}
			files[fd.Path()] = nf
		}
		out = append(out, nf.Services().ByName(sd.Name()))
	}
	return out
}

// rawPost posts one JSON-RPC message and returns the response's JSON body
// (the data of its SSE event, when it streams) and headers.
func rawPost(t *testing.T, endpoint string, h http.Header, msg map[string]any) ([]byte, http.Header) {
	t.Helper()
	body, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, endpoint, bytes.NewReader(body))
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if i := bytes.Index(b, []byte("data: ")); i >= 0 {
		b = bytes.TrimSpace(b[i+len("data: "):])
		if j := bytes.Index(b, []byte("\n")); j >= 0 {
			b = b[:j]
		}
	}
	return b, res.Header
}

// toolsListWire is the wire result of tools/list at version (each page,
// joined), from a client that declares caps (nil: none).
func toolsListWire(t *testing.T, endpoint, version string, caps map[string]any) []byte {
	t.Helper()
	h := http.Header{}
	id := 1
	meta := func() map[string]any { return nil }
	if version >= edge.ModernProtocol {
		h.Set("Mcp-Protocol-Version", version)
		meta = func() map[string]any {
			return map[string]any{"io.modelcontextprotocol/protocolVersion": version, "io.modelcontextprotocol/clientCapabilities": caps,
				"io.modelcontextprotocol/clientInfo": map[string]any{"name": "apps-test", "version": "1"}}
		}
	} else {
		b, hdr := rawPost(t, endpoint, h, map[string]any{"jsonrpc": "2.0", "id": id, "method": "initialize", "params": map[string]any{
			"protocolVersion": version, "capabilities": caps, "clientInfo": map[string]any{"name": "apps-test", "version": "1"}}})
		id++
		if hdr.Get("Mcp-Session-Id") == "" {
			t.Fatalf("initialize at %s: no session: %s", version, b)
		}
		h.Set("Mcp-Session-Id", hdr.Get("Mcp-Session-Id"))
		h.Set("Mcp-Protocol-Version", version)
		rawPost(t, endpoint, h, map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	}
	var all []byte
	cursor := ""
	for {
		params := map[string]any{}
		if m := meta(); m != nil {
			params["_meta"] = m
		}
		if cursor != "" {
			params["cursor"] = cursor
		}
		h.Set("Mcp-Method", "tools/list")
		b, _ := rawPost(t, endpoint, h, map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": params})
		id++
		var msg struct {
			Result struct {
				NextCursor string `json:"nextCursor"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(b, &msg); err != nil || msg.Error != nil {
			t.Fatalf("tools/list at %s: %s (%v)", version, b, err)
		}
		all = append(all, b...)
		if cursor = msg.Result.NextCursor; cursor == "" {
			return all
		}
	}
}

func TestToolsListOfAClientWithoutAppsIsUnchanged(t *testing.T) {
	with := productEdge(t, nil)
	without := productEdge(t, func(c *edge.Config) { c.Contracts = withoutViews(t) })
	for _, version := range []string{edge.ModernProtocol, "2025-11-25", "2025-06-18"} {
		got := toolsListWire(t, with.URL, version, map[string]any{})
		want := toolsListWire(t, without.URL, version, map[string]any{})
		if !bytes.Equal(got, want) {
			t.Errorf("%s: tools/list of a client without MCP Apps differs from the mesh without views (%d bytes, want %d)", version, len(got), len(want))
		}
		if bytes.Contains(got, []byte("ui://")) {
			t.Errorf("%s: tools/list of a client without MCP Apps names a view", version)
		}
		// A client that declares the extension without the views' MIME type
		// gets no view either.
		if other := toolsListWire(t, with.URL, version, map[string]any{"extensions": map[string]any{extUI: map[string]any{"mimeTypes": []string{"text/html"}}}}); !bytes.Equal(other, want) {
			t.Errorf("%s: tools/list of a client declaring MCP Apps for another MIME type differs", version)
		}
		ui := toolsListWire(t, with.URL, version, map[string]any{"extensions": map[string]any{extUI: map[string]any{"mimeTypes": []string{mimeApp}}}})
		if !bytes.Contains(ui, []byte(`"_meta":{"ui":{"resourceUri":"ui://toolmesh/owner/ask-card"}}`)) {
			t.Errorf("%s: tools/list of an MCP Apps client lacks owner_get_ask's view", version)
		}
		t.Logf("%s: tools/list %d bytes without MCP Apps, %d with", version, len(got), len(ui))
	}
}

func TestAppsClientGetsViewsAndToolMeta(t *testing.T) {
	f := productEdge(t, nil)
	wantViews := map[string]string{"owner_get_ask": "ui://toolmesh/owner/ask-card", "schedules_get": "ui://toolmesh/schedules/schedule-card",
		"workflows_get_run": "ui://toolmesh/workflows/run-view"}
	for _, version := range []string{edge.ModernProtocol, "2025-11-25", "2025-03-26"} {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			cs := f.Connect(t, version, "", &mcp.ClientOptions{Capabilities: uiCaps()})
			if version < edge.ModernProtocol {
				if _, ok := cs.InitializeResult().Capabilities.Extensions[extUI]; !ok {
					t.Errorf("initialize: the server does not declare %s", extUI)
				}
			} else {
				res, rerr := rpc2026(t, f.URL, "server/discover", nil)
				var disc struct {
					Capabilities struct {
						Extensions map[string]json.RawMessage `json:"extensions"`
					} `json:"capabilities"`
				}
				if rerr != nil || json.Unmarshal(res, &disc) != nil || disc.Capabilities.Extensions[extUI] == nil {
					t.Errorf("server/discover: %s (%v): want %s among the extensions", res, rerr, extUI)
				}
			}
			for tool, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				var got string
				if ui, ok := tool.Meta["ui"].(map[string]any); ok {
					got, _ = ui["resourceUri"].(string)
				}
				if got != wantViews[tool.Name] {
					t.Errorf("tool %s: _meta.ui.resourceUri = %q, want %q", tool.Name, got, wantViews[tool.Name])
				}
			}
			res, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, r := range res.Resources {
				if strings.HasPrefix(r.URI, "ui://") {
					listed = append(listed, r.URI)
					if r.MIMEType != mimeApp {
						t.Errorf("%s: mimeType %q, want %q", r.URI, r.MIMEType, mimeApp)
					}
				}
			}
			if want := []string{wantViews["owner_get_ask"], wantViews["schedules_get"], wantViews["workflows_get_run"]}; !slices.Equal(listed, want) {
				t.Errorf("resources/list views = %v, want %v", listed, want)
			}
			for _, uri := range wantViews {
				rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				if err != nil {
					t.Fatalf("read %s: %v", uri, err)
				}
				c := rr.Contents[0]
				if c.MIMEType != mimeApp || !strings.HasPrefix(c.Text, "<!doctype html>") || !strings.Contains(c.Text, "ui/initialize") {
					t.Errorf("%s: mimeType %q, text %.60q…: want a view", uri, c.MIMEType, c.Text)
				}
				b, _ := json.Marshal(c.Meta)
				if want := `{"ui":{"csp":{"baseUriDomains":[],"connectDomains":[],"frameDomains":[],"resourceDomains":[]},"permissions":{},"prefersBorder":true}}`; string(b) != want {
					t.Errorf("%s: _meta = %s, want %s", uri, b, want)
				}
			}
		})
	}
}

func TestAppsFollowTheSelection(t *testing.T) {
	f := productEdge(t, nil)
	ctx := context.Background()
	// /mcp/x/owner selects the owner toolset: its view, not the schedules'.
	cs := mustDial(t, strings.TrimSuffix(f.URL, "/mcp")+"/mcp/x/owner", "2025-11-25", nil, &mcp.ClientOptions{Capabilities: uiCaps()})
	res, err := cs.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range res.Resources {
		if strings.HasPrefix(r.URI, "ui://") {
			listed = append(listed, r.URI)
		}
	}
	if want := []string{"ui://toolmesh/owner/ask-card"}; !slices.Equal(listed, want) {
		t.Errorf("resources/list views through /mcp/x/owner = %v, want %v", listed, want)
	}
	// Without the extension resources/list names no view.
	plain := mustDial(t, f.URL, "2025-11-25", nil, nil)
	res, err = plain.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Resources {
		if strings.HasPrefix(r.URI, "ui://") {
			t.Errorf("resources/list of a client without MCP Apps lists %s", r.URI)
		}
	}
}

// TestViewsShareOneBridge: each view is one self-contained file, so each
// served view carries the view side of the MCP Apps protocol, which make
// generate writes into it from the one bridge.js; they stay the same.
func TestViewsShareOneBridge(t *testing.T) {
	views, err := fs.Glob(assets.FS, "toolmesh/*/v1/views/*.html")
	if err != nil || len(views) < 2 {
		t.Fatalf("views in the assets: %v, %v", views, err)
	}
	var first, firstName string
	for _, v := range views {
		b, err := fs.ReadFile(assets.FS, v)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i, j := strings.Index(s, "/* mcp-apps bridge: begin"), strings.Index(s, "/* mcp-apps bridge: end */")
		if i < 0 || j < i {
			t.Errorf("%s: no mcp-apps bridge block", v)
			continue
		}
		if first == "" {
			first, firstName = s[i:j], v
		} else if s[i:j] != first {
			t.Errorf("%s: its mcp-apps bridge differs from %s's", v, firstName)
		}
		for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "<script src", "<link "} {
			if strings.Contains(s, banned) {
				t.Errorf("%s uses %s: a view builds its DOM from text nodes and loads nothing", v, banned)
			}
		}
	}
}
