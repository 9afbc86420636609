package main

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1/reputationv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
	"github.com/toolmesh/toolmesh/services/reputation"
	"github.com/toolmesh/toolmesh/services/reputation/reputationstore"
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
	Checkpoint struct {
		Origin string `json:"origin"`
	} `json:"checkpoint"`
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

// publishAttestation publishes the session's agent's attestation. The
// audit service signs its first checkpoint at start; until then a publish
// is refused as a conflict.
func publishAttestation(t *testing.T, s *mcp.ClientSession) attestation {
	t.Helper()
	var published struct{ Attestation attestation }
	eventually(t, time.Minute, "attestation published", func() bool {
		env := callTool(t, s, "reputation_publish_attestation", map[string]any{"ttl_hours": 2})
		if env.Status != "ok" {
			if env.DomainCode != "conflict" {
				t.Fatalf("publish = %+v, want ok (or conflict before the first checkpoint)", env)
			}
			return false
		}
		okData(t, env, &published)
		return true
	})
	return published.Attestation
}

// TestReputationAttestationAcrossTwoMeshes runs two meshes (each its own
// `toolmesh up`): alice, on the first, publishes her attestation; it is a
// resource of her mesh, and bob, on the second, verifies it at its URL
// against the first mesh's published keys — the mesh key for the
// attestation, the audit key for its checkpoint — and alice verifies bob's
// the same way.
func TestReputationAttestationAcrossTwoMeshes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two whole meshes")
	}
	m1, m2, alice, bob := twoMeshes(t)
	// The A2A endpoint up prints is its development agent's (alice's).
	aliceCard := m1.Link(t, linkA2A)
	att := publishAttestation(t, alice)
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

	// Alice's card, as the first mesh's A2A door serves it, carries the
	// attestation as an extension: the second mesh verifies it from the
	// card, the key served at the card's origin.
	got = verifyResult{}
	okData(t, callTool(t, bob, "reputation_verify", map[string]any{"url": aliceCard}), &got)
	if !got.Verified || got.Source != "SOURCE_CARD" || !got.IssuerMatchesCard || !got.SignatureValid || !got.Fresh ||
		got.Attestation.AgentID != "alice" || got.Attestation.Score.Score != att.Score.Score {
		t.Errorf("bob's verify of alice's card %s = %+v, want verified from the card's extension", aliceCard, got)
	}

	// Each mesh publishes its audit checkpoint key apart from its mesh key,
	// and the first mesh's is the key of the data dir's audit.pub.
	keysDoc, err := httpGet(att.Issuer + auditcheckpoint.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	auditKeys, err := auditcheckpoint.ParseKeys(keysDoc)
	if err != nil || len(auditKeys) != 1 || !strings.HasPrefix(keysDoc, got.Attestation.Checkpoint.Origin+"+") {
		t.Errorf("%s%s = %q (%v), want the audit key that signed checkpoint %s", att.Issuer, auditcheckpoint.KeysPath, keysDoc, err, got.Attestation.Checkpoint.Origin)
	}
	if jwks, err := httpGet(att.Issuer + a2alink.KeysPath); err != nil || strings.Contains(jwks, "toolmesh-audit") {
		t.Errorf("the mesh's JWKS = %s, %v; want it without the audit key", jwks, err)
	}

	// And the other way round: alice verifies bob's, from his card on the
	// second mesh.
	bobAtt := publishAttestation(t, bob)
	got = verifyResult{}
	okData(t, callTool(t, alice, "reputation_verify", map[string]any{"url": m2.Link(t, linkA2A)}), &got)
	if !got.Verified || !got.SignatureValid || !got.CheckpointSigned || got.Attestation.AgentID != "bob" || got.Attestation.Score.Score != bobAtt.Score.Score {
		t.Errorf("alice's verify of bob's card = %+v, want verified, its checkpoint signature checked", got)
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

// TestReputationCardExtensionThroughTheEdge publishes an attestation
// through the edge, reads the card extensions the A2A door will put on
// agents' cards (edge.CardExtensions), serves them on a card as the door
// will, and verifies that card: the whole card path but the door itself.
func TestReputationCardExtensionThroughTheEdge(t *testing.T) {
	aust, err := auditstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "audit.db")))
	if err != nil {
		t.Fatal(err)
	}
	auditKey, err := keyfile.Generate()
	if err != nil {
		t.Fatal(err)
	}
	auditSvc := audit.New(aust, audit.Config{Signer: auditcheckpoint.NewSigner(auditKey), CheckpointLog: filepath.Join(t.TempDir(), "checkpoints.log")})
	if _, err := auditSvc.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	auditSrv := servertest.Start(t, auditSvc.Registration())

	// The mesh's A2A side: its published keys, and the card of each agent
	// with the extensions the edge gives (as the door will serve them).
	meshKey, err := keyfile.Generate()
	if err != nil {
		t.Fatal(err)
	}
	var exts port.CardExtensions
	a2a := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case a2alink.KeysPath:
			_ = json.NewEncoder(w).Encode(a2alink.Keys(meshKey.Public().(ed25519.PublicKey)))
			return
		case auditcheckpoint.KeysPath:
			_, _ = w.Write([]byte(auditcheckpoint.FormatKeys(auditKey.Public().(ed25519.PublicKey))))
			return
		}
		agent := strings.TrimPrefix(r.URL.Path, "/a2a/agents/")
		var list []map[string]any
		for _, e := range exts.CardExtensions(r.Context(), agent) {
			list = append(list, map[string]any{"uri": e.URI, "description": e.Description, "params": e.Params})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": agent, "capabilities": map[string]any{"extensions": list}})
	}))
	t.Cleanup(a2a.Close)

	signer, err := reputation.NewSigner(meshKey, a2a.URL)
	if err != nil {
		t.Fatal(err)
	}
	allow, err := egress.ParsePrefixes("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	st, err := reputationstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "reputation.db")))
	if err != nil {
		t.Fatal(err)
	}
	repSrv := servertest.Start(t, reputation.New(st, reputation.Config{
		Audit:  auditv1connect.NewAuditServiceClient(servertest.HTTPClient(), auditSrv.URL, meshclient.Config{}.Options()...),
		Signer: signer,
		Egress: egress.Policy{Allow: allow},
	}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	e, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			auditv1connect.AuditServiceName:           auditSrv.URL,
			reputationv1connect.ReputationServiceName: repSrv.URL,
		},
		DevAgent:   "alice",
		HTTPClient: edgeClient,
	})
	exts = e.Pipeline().(port.CardExtensions) // what the A2A door reads for a card

	if got := exts.CardExtensions(t.Context(), "alice"); len(got) != 0 {
		t.Errorf("alice's card extensions before she published = %v, want none", got)
	}
	var published struct{ Attestation attestation }
	okData(t, callTool(t, s, "reputation_publish_attestation", map[string]any{}), &published)
	got := exts.CardExtensions(t.Context(), "alice")
	if len(got) != 1 || got[0].URI != reputation.Extension {
		t.Fatalf("alice's card extensions = %v, want the reputation extension", got)
	}
	if a, _ := got[0].Params["attestation"].(map[string]any); a["jws"] != published.Attestation.JWS {
		t.Errorf("the extension's params = %v, want the published attestation", got[0].Params)
	}

	var res verifyResult
	okData(t, callTool(t, s, "reputation_verify", map[string]any{"url": a2a.URL + "/a2a/agents/alice"}), &res)
	if !res.Verified || res.Source != "SOURCE_CARD" || !res.IssuerMatchesCard || !res.SignatureValid || !res.Fresh || !res.CheckpointSigned {
		t.Errorf("verify alice's card = %+v, want verified from the card", res)
	}
	// Bob's card does not carry alice's attestation.
	res = verifyResult{}
	okData(t, callTool(t, s, "reputation_verify", map[string]any{"url": a2a.URL + "/a2a/agents/bob"}), &res)
	if res.Verified {
		t.Errorf("verify bob's card = %+v, want not verified: no attestation", res)
	}
}
