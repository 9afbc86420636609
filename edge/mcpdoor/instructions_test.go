package mcpdoor_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/mcpdoor"
)

// The server's instructions (edge/mcpdoor/instructions.go): what a client
// reads before it picks a tool, composed from the contracts.

// instructionsAt are the instructions a go-sdk client at version reads
// from endpoint (initialize, or server/discover at 2026-07-28).
func instructionsAt(t *testing.T, endpoint, version string, h http.Header) string {
	t.Helper()
	cs := mustDial(t, endpoint, version, h, nil)
	defer cs.Close()
	return cs.InitializeResult().Instructions
}

// TestInstructionsNameEveryToolsetWithinTheBudget: for every selection a
// URL makes — the edge's default (all, default, dynamic) and each
// toolset's path — the instructions name every toolset with what it is
// for and how to reach it, say what the endpoint lists, and stay within
// the budget; a selection made by header changes nothing (server/discover
// is cached by URL).
func TestInstructionsNameEveryToolsetWithinTheBudget(t *testing.T) {
	for _, fallback := range []string{"all", "default", "dynamic"} {
		f := productEdge(t, func(c *edge.Config) { c.MCP.Toolsets = fallback })
		toolsets := f.Edge.Registry().Toolsets()
		check := func(what, got string) {
			t.Helper()
			if len(got) > mcpdoor.MaxInstructions {
				t.Errorf("%s: %d bytes, over the budget of %d", what, len(got), mcpdoor.MaxInstructions)
			}
			for _, ts := range toolsets {
				if !strings.Contains(got, "\n- "+ts.Name+": ") {
					t.Errorf("%s: toolset %s is not named:\n%s", what, ts.Name, got)
				}
			}
			if !strings.Contains(got, edge.PathToolsets+"<toolset>") || !strings.Contains(got, edge.HeaderToolsets) {
				t.Errorf("%s: how to reach the other toolsets is not said:\n%s", what, got)
			}
			t.Logf("instructions of %s: %d bytes", what, len(got))
		}
		base := strings.TrimSuffix(f.URL, "/mcp")
		for _, v := range []string{edge.ModernProtocol, "2025-11-25"} {
			got := instructionsAt(t, f.URL, v, nil)
			check("/mcp with --toolsets "+fallback+" at "+v, got)
			switch fallback {
			case "dynamic":
				if !strings.Contains(got, "tool search mode") {
					t.Errorf("dynamic: tool search mode is not said:\n%s", got)
				}
			case "all":
				if !strings.Contains(got, "every toolset") {
					t.Errorf("all: the endpoint's reach is not said:\n%s", got)
				}
			}
			if byHeader := instructionsAt(t, f.URL, v, http.Header{edge.HeaderToolsets: {toolsets[0].Name}}); byHeader != got {
				t.Errorf("at %s a selection by header changed the instructions of /mcp:\n%s\nwant\n%s", v, byHeader, got)
			}
		}
		if fallback != "all" {
			continue
		}
		for _, ts := range toolsets {
			got := instructionsAt(t, base+edge.PathToolsets+ts.Name, edge.ModernProtocol, nil)
			check(edge.PathToolsets+ts.Name, got)
			if !strings.Contains(got, "This endpoint lists the tools of: "+ts.Name+".") {
				t.Errorf("%s: the endpoint's toolset is not said:\n%s", ts.Name, got)
			}
			if legacy := instructionsAt(t, base+edge.PathToolsets+ts.Name, "2025-11-25", nil); legacy != got {
				t.Errorf("%s: the session era reads other instructions:\n%s", ts.Name, legacy)
			}
		}
	}
}
