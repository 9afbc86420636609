package main

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// attestation is the part of a reputation attestation the tests read.
type attestation struct {
	AgentID string `json:"agent_id"`
	Issuer  string `json:"issuer"`
	URL     string `json:"url"`
	JWS     string `json:"jws"`
	Score   struct {
		Score int `json:"score"`
	} `json:"score"`
}

type verifyResult struct {
	Verified          bool        `json:"verified"`
	Source            string      `json:"source"`
	SignatureValid    bool        `json:"signature_valid"`
	IssuerMatchesCard bool        `json:"issuer_matches_card"`
	Fresh             bool        `json:"fresh"`
	CheckpointSigned  bool        `json:"checkpoint_signed"`
	Reasons           []string    `json:"reasons"`
	Attestation       attestation `json:"attestation"`
}

// TestReputationAttestationAcrossTwoMeshes runs two meshes (each its own
// `toolmesh up`): alice, on the first, publishes her attestation; it is a
// resource of her mesh, and bob, on the second, verifies it at its URL
// against the first mesh's published keys.
func TestReputationAttestationAcrossTwoMeshes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two whole meshes")
	}
	bin, temporal := meshBinaries(t)
	// Both meshes run on loopback: the attestation and the published keys
	// must be reachable for development.
	allow := remoteEgressAllowEnv + "=127.0.0.1"
	m1 := startUp(t, bin, temporal, allow, "TOOLMESH_DEV_AGENT=alice")
	m2 := startUp(t, bin, temporal, allow, "TOOLMESH_DEV_AGENT=bob")
	alice, bob := mcpSessionTo(t, m1.Link(t, linkMCP)), mcpSessionTo(t, m2.Link(t, linkMCP))
	// The A2A endpoint up prints is its development agent's (alice's).
	aliceCard := m1.Link(t, linkA2A)

	// The audit service signs its first checkpoint at start; until then a
	// publish is refused as a conflict.
	var published struct{ Attestation attestation }
	eventually(t, time.Minute, "alice's attestation published", func() bool {
		env := callTool(t, alice, "reputation_publish_attestation", map[string]any{"ttl_hours": 2})
		if env.Status != "ok" {
			if env.DomainCode != "conflict" {
				t.Fatalf("publish = %+v, want ok (or conflict before the first checkpoint)", env)
			}
			return false
		}
		okData(t, env, &published)
		return true
	})
	att := published.Attestation
	if att.AgentID != "alice" || !strings.HasPrefix(aliceCard, att.Issuer+"/") || att.Issuer == "" || att.JWS == "" || att.URL == "" {
		t.Fatalf("published %+v, want alice's attestation issued by the first mesh's A2A endpoint (%s), with a URL", att, aliceCard)
	}

	// It is a resource of the first mesh.
	res, err := alice.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "toolmesh://reputation/attestations/alice"})
	if err != nil || len(res.Contents) != 1 || !strings.Contains(res.Contents[0].Text, att.JWS) {
		t.Fatalf("read alice's attestation resource = %+v, %v; want the published attestation", res, err)
	}

	// The second mesh verifies it at its URL, against the first mesh's keys.
	var got verifyResult
	okData(t, callTool(t, bob, "reputation_verify", map[string]any{"url": att.URL}), &got)
	if !got.Verified || got.Source != "SOURCE_ATTESTATION_URL" || !got.SignatureValid || !got.Fresh || !got.CheckpointSigned ||
		got.IssuerMatchesCard || got.Attestation.AgentID != "alice" || got.Attestation.Score.Score != att.Score.Score {
		t.Errorf("bob's verify of %s = %+v, want verified at the attestation URL", att.URL, got)
	}

	// Until the A2A door carries card extensions, alice's card has none,
	// and verifying it says so.
	got = verifyResult{}
	okData(t, callTool(t, bob, "reputation_verify", map[string]any{"url": aliceCard}), &got)
	if got.Verified || !slices.ContainsFunc(got.Reasons, func(r string) bool { return strings.Contains(r, "declares no reputation extension") }) {
		t.Errorf("bob's verify of alice's card = %+v, want not verified: no extension", got)
	}

	// A forged copy (another score under the same signature) is refused.
	forged := forgeScore(t, att.JWS)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"jws": forged})
	}))
	t.Cleanup(srv.Close)
	got = verifyResult{}
	okData(t, callTool(t, bob, "reputation_verify", map[string]any{"url": srv.URL + "/attestation"}), &got)
	if got.Verified || got.SignatureValid || !slices.ContainsFunc(got.Reasons, func(r string) bool { return strings.Contains(r, "does not verify") }) {
		t.Errorf("bob's verify of a forged attestation = %+v, want refused: the signature does not verify", got)
	}
}

var b64url = base64.RawURLEncoding

// forgeScore returns jws with its statement's score set to 100, under the
// original signature.
func forgeScore(t *testing.T, jws string) string {
	t.Helper()
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %q", jws)
	}
	raw, err := b64url.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var payload map[string]any
	if err := json.Unmarshal(raw, &payload); err != nil {
		t.Fatal(err)
	}
	payload["reputation"].(map[string]any)["score"] = 100
	b, _ := json.Marshal(payload)
	return parts[0] + "." + b64url.EncodeToString(b) + "." + parts[2]
}
