package mcpdoor_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
)

// Skills (edge/mcpdoor/skills.go): the toolsets' SKILL.md files, listed by
// selection, fetched by URI, read as resources.

// rpc2026 posts one stateless JSON-RPC request to endpoint and returns its
// result or error.
func rpc2026(t *testing.T, endpoint, method string, params map[string]any) (json.RawMessage, *struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{"io.modelcontextprotocol/protocolVersion": edge.ModernProtocol, "io.modelcontextprotocol/clientCapabilities": map[string]any{},
		"io.modelcontextprotocol/clientInfo": map[string]any{"name": "skills-test", "version": "1"}}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", edge.ModernProtocol)
	req.Header.Set("Mcp-Method", method)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if i := strings.Index(string(b), "data: "); i >= 0 {
		b = []byte(strings.TrimSpace(string(b[i+len("data: "):])))
	}
	var msg struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &msg); err != nil {
		t.Fatalf("%s: %s: %v", method, b, err)
	}
	return msg.Result, msg.Error
}

type skillWire struct {
	URI         string         `json:"uri"`
	Frontmatter map[string]any `json:"frontmatter"`
	Resources   []struct {
		URI    string `json:"uri"`
		Digest string `json:"digest"`
		Size   int    `json:"size"`
	} `json:"resources"`
}

func TestSkillsFollowTheSelectionAndAreReadAsResources(t *testing.T) {
	f := productEdge(t, nil)
	base := strings.TrimSuffix(f.URL, "/mcp")

	list := func(endpoint string) []skillWire {
		t.Helper()
		res, rerr := rpc2026(t, endpoint, "skills/list", nil)
		if rerr != nil {
			t.Fatalf("skills/list at %s: %+v", endpoint, rerr)
		}
		var out struct {
			ResultType string      `json:"resultType"`
			Skills     []skillWire `json:"skills"`
			TTLMs      *int        `json:"ttlMs"`
			CacheScope string      `json:"cacheScope"`
		}
		if err := json.Unmarshal(res, &out); err != nil || out.ResultType != "complete" || out.TTLMs == nil || out.CacheScope == "" {
			t.Fatalf("skills/list at %s = %s, want a complete result with ttlMs and cacheScope", endpoint, res)
		}
		return out.Skills
	}
	all := list(f.URL)
	if len(all) != 4 {
		t.Fatalf("skills/list at /mcp: %d skills, want the 4 the contracts ship: %+v", len(all), all)
	}
	owner := list(base + edge.PathToolsets + "owner")
	if len(owner) != 1 || owner[0].URI != "skill://toolmesh/owner/ask-the-owner/SKILL.md" || owner[0].Frontmatter["name"] != "ask-the-owner" {
		t.Fatalf("skills/list at /mcp/x/owner = %+v, want the owner toolset's skill alone", owner)
	}
	if got := list(base + edge.PathToolsets + "tasks"); len(got) != 0 {
		t.Errorf("skills/list at /mcp/x/tasks = %+v, want none", got)
	}

	// skills/get answers for a skill the selection does not list.
	const wf = "skill://toolmesh/workflows/run-an-agent-workflow/SKILL.md"
	res, rerr := rpc2026(t, base+edge.PathToolsets+"owner", "skills/get", map[string]any{"uri": wf})
	var got struct {
		Skill skillWire `json:"skill"`
	}
	if rerr != nil || json.Unmarshal(res, &got) != nil || got.Skill.URI != wf || len(got.Skill.Resources) != 1 {
		t.Fatalf("skills/get %s = %s %+v", wf, res, rerr)
	}
	if _, rerr := rpc2026(t, f.URL, "skills/get", map[string]any{"uri": "skill://toolmesh/owner/nosuch/SKILL.md"}); rerr == nil || rerr.Code != -32602 {
		t.Errorf("skills/get of an unknown skill: %+v, want -32602", rerr)
	}

	// Each file is a resource whose bytes match the manifest's digest and
	// size, read over a session as over the stateless protocol.
	cs := mustDial(t, f.URL, "2025-11-25", nil, nil)
	defer cs.Close()
	if _, ok := cs.InitializeResult().Capabilities.Extensions["io.modelcontextprotocol/skills"]; !ok {
		t.Errorf("the skills extension is not declared: %+v", cs.InitializeResult().Capabilities)
	}
	for _, s := range all {
		for _, r := range s.Resources {
			rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: r.URI})
			if err != nil || len(rr.Contents) != 1 {
				t.Fatalf("read %s: %v", r.URI, err)
			}
			c := rr.Contents[0]
			sum := sha256.Sum256([]byte(c.Text))
			if c.MIMEType != "text/markdown" || "sha256:"+hex.EncodeToString(sum[:]) != r.Digest || len(c.Text) != r.Size {
				t.Errorf("%s: %s, %d bytes, want text/markdown matching %s (%d bytes)", r.URI, c.MIMEType, len(c.Text), r.Digest, r.Size)
			}
			if !strings.Contains(c.Text, "name: "+s.Frontmatter["name"].(string)) {
				t.Errorf("%s does not carry its frontmatter", r.URI)
			}
		}
	}
}
