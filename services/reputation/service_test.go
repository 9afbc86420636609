package reputation_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/keyfile"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1/reputationv1connect"
	"github.com/toolmesh/toolmesh/services/reputation"
	"github.com/toolmesh/toolmesh/services/reputation/reputationstore"
)

// fakeAudit is an audit trail in memory, read as the audit service answers:
// filtered by actor and time, newest first, in pages.
type fakeAudit struct {
	auditv1connect.UnimplementedAuditServiceHandler
	mu         sync.Mutex
	records    []*auditv1.Record
	outcomes   []*auditv1.CallOutcome
	checkpoint *auditv1.SignedCheckpoint
	intact     bool
	// key signs the checkpoints: the mesh's audit checkpoint key.
	key ed25519.PrivateKey
}

func (f *fakeAudit) add(actor, tool string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := int64(len(f.records) + 1)
	f.records = append(f.records, &auditv1.Record{Seq: seq, Actor: actor, Tool: tool, Time: timestamppb.New(at),
		Outcome: auditv1.Outcome_OUTCOME_SUCCEEDED, Hash: fmt.Sprintf("%064x", seq)})
	// A checkpoint signed at the newest record.
	last := f.records[len(f.records)-1]
	cp, err := auditcheckpoint.NewSigner(f.key).Sign(seq, last.GetHash(), at)
	if err != nil {
		panic(err)
	}
	f.checkpoint = &auditv1.SignedCheckpoint{Origin: cp.Origin, Seq: seq, Hash: cp.Hash, Time: timestamppb.New(cp.Time), Note: cp.Note}
}

func (f *fakeAudit) outcome(agent, tool, code string, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes = append(f.outcomes, &auditv1.CallOutcome{Agent: agent, Tool: tool, DomainCode: code, Time: timestamppb.New(at)})
}

// SummarizeOutcomes counts as the audit service does; positions are
// indexes from 1.
func (f *fakeAudit) SummarizeOutcomes(_ context.Context, req *auditv1.SummarizeOutcomesRequest) (*auditv1.SummarizeOutcomesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	res := &auditv1.SummarizeOutcomesResponse{Through: int64(len(f.outcomes))}
	counts := map[[2]string]int64{}
	days := map[string]bool{}
	for _, o := range f.outcomes {
		at := o.GetTime().AsTime()
		if o.GetAgent() != req.GetAgent() || at.Before(req.GetSince().AsTime()) || !at.Before(req.GetUntil().AsTime()) {
			continue
		}
		counts[[2]string{o.GetTool(), o.GetDomainCode()}]++
		days[at.Format(time.DateOnly)] = true
	}
	for k, n := range counts {
		res.Counts = append(res.Counts, &auditv1.OutcomeCount{Tool: k[0], DomainCode: k[1], Count: n})
	}
	res.ActiveDays = int32(len(days))
	return res, nil
}

func (f *fakeAudit) head() *auditv1.Checkpoint {
	if len(f.records) == 0 {
		return &auditv1.Checkpoint{Hash: strings.Repeat("0", 64)}
	}
	last := f.records[len(f.records)-1]
	return &auditv1.Checkpoint{Seq: last.GetSeq(), Hash: last.GetHash()}
}

func (f *fakeAudit) Head(context.Context, *auditv1.HeadRequest) (*auditv1.HeadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &auditv1.HeadResponse{Head: f.head()}, nil
}

func (f *fakeAudit) Verify(context.Context, *auditv1.VerifyRequest) (*auditv1.VerifyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &auditv1.VerifyResponse{Intact: f.intact, Head: f.head(), Checkpoint: f.checkpoint}, nil
}

func (f *fakeAudit) List(_ context.Context, req *auditv1.ListRequest) (*auditv1.ListResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*auditv1.Record
	for _, r := range slices.Backward(f.records) {
		if r.GetActor() == req.GetActor() && !r.GetTime().AsTime().Before(req.GetSince().AsTime()) && r.GetTime().AsTime().Before(req.GetUntil().AsTime()) {
			out = append(out, r)
		}
	}
	limit := paging.Limit(req.GetLimit())
	page := paging.New(int(req.GetOffset()), limit, len(out))
	out = out[min(int(req.GetOffset()), len(out)):min(int(req.GetOffset())+limit, len(out))]
	return &auditv1.ListResponse{Records: out, Page: page}, nil
}

// meshA is one mesh's side of attestations: its key, the A2A endpoint
// that publishes the key and serves agents' cards (carrying what
// reputation_get_attestation answers, as the A2A door will), and its
// reputation service.
type meshA struct {
	key     ed25519.PrivateKey
	a2a     *httptest.Server
	audit   *fakeAudit
	client  reputationv1connect.ReputationServiceClient
	public  string
	cardExt bool
	now     time.Time
	// auditKeys, when set, is what the A2A endpoint serves at
	// auditcheckpoint.KeysPath instead of the audit key ("": 404).
	auditKeys atomic.Pointer[string]
}

func newMesh(t *testing.T, now time.Time) *meshA {
	t.Helper()
	m := &meshA{audit: &fakeAudit{intact: true}, cardExt: true, now: now}
	var err error
	if m.key, err = keyfile.Generate(); err != nil {
		t.Fatal(err)
	}
	if m.audit.key, err = keyfile.Generate(); err != nil {
		t.Fatal(err)
	}
	m.a2a = httptest.NewServer(http.HandlerFunc(m.serveA2A))
	t.Cleanup(m.a2a.Close)
	auditSrv := servertest.Start(t, server.Register(auditv1connect.AuditServiceName, auditv1connect.AuditServiceHandler(m.audit), auditv1connect.NewAuditServiceHandler, nil))
	signer, err := reputation.NewSigner(m.key, m.a2a.URL)
	if err != nil {
		t.Fatal(err)
	}
	st, err := reputationstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "reputation.db")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := reputation.Config{
		Audit:  auditv1connect.NewAuditServiceClient(auditSrv.Client(), auditSrv.URL, servertest.ClientOptions(nil)...),
		Signer: signer,
		Egress: loopback(t),
		Now:    func() time.Time { return m.now },
	}
	// The public URL is known once a server listens: a first server of the
	// same store serves the attestations the second one publishes.
	public := servertest.Start(t, reputation.New(st, cfg).Registration())
	m.public, cfg.PublicURL = public.URL, public.URL
	srv := servertest.Start(t, reputation.New(st, cfg).Registration())
	m.client = reputationv1connect.NewReputationServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	return m
}

// loopback lets Verify reach test servers on loopback.
func loopback(t *testing.T) egress.Policy {
	allow, err := egress.ParsePrefixes("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return egress.Policy{Allow: allow}
}

func (m *meshA) serveA2A(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case a2alink.KeysPath:
		_ = json.NewEncoder(w).Encode(a2alink.Keys(m.key.Public().(ed25519.PublicKey)))
		return
	case auditcheckpoint.KeysPath:
		doc := auditcheckpoint.FormatKeys(m.audit.key.Public().(ed25519.PublicKey))
		if d := m.auditKeys.Load(); d != nil {
			doc = *d
		}
		if doc == "" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", auditcheckpoint.KeysContentType)
		_, _ = w.Write([]byte(doc))
		return
	}
	agent, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/a2a/agents/"), a2alink.CardPath)
	if !ok {
		http.NotFound(w, r)
		return
	}
	card := map[string]any{"name": agent, "url": m.a2a.URL + "/a2a/agents/" + agent, "capabilities": map[string]any{}}
	if m.cardExt {
		res, err := m.client.GetAttestation(servertest.As(r.Context(), "toolmesh-a2a"), &reputationv1.GetAttestationRequest{AgentId: agent})
		if err == nil {
			b, _ := protojson.Marshal(res)
			var params map[string]any
			_ = json.Unmarshal(b, &params)
			card["capabilities"] = map[string]any{"extensions": []any{map[string]any{"uri": reputation.Extension, "params": params}}}
		}
	}
	_ = json.NewEncoder(w).Encode(card)
}

func (m *meshA) cardURL(agent string) string { return m.a2a.URL + "/a2a/agents/" + agent }

func (m *meshA) publish(t *testing.T, agent string) *reputationv1.Attestation {
	t.Helper()
	res, err := m.client.PublishAttestation(servertest.As(t.Context(), agent), &reputationv1.PublishAttestationRequest{})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	return res.GetAttestation()
}

func verify(t *testing.T, m *meshA, url string) *reputationv1.VerifyResponse {
	t.Helper()
	res, err := m.client.Verify(servertest.As(t.Context(), "verifier"), &reputationv1.VerifyRequest{Url: url})
	if err != nil {
		t.Fatalf("verify %s: %v", url, err)
	}
	return res
}

var now0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func TestCheckScoresTheAgentsAuditRecords(t *testing.T) {
	m := newMesh(t, now0)
	m.audit.add("alice", "credits_grant", now0.Add(-48*time.Hour))
	m.audit.add("alice", "agents_register", now0.Add(-time.Hour))
	m.audit.add("bob", "credits_grant", now0.Add(-time.Hour))
	m.audit.add("alice", "credits_grant", now0.Add(-40*24*time.Hour)) // before the window

	res, err := m.client.Check(servertest.As(t.Context(), "alice"), &reputationv1.CheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sc := res.GetScore()
	c := sc.GetComponents()
	// 5×2/50 + 10×2/30 + 5×2/10 = 0.2 + 0.67 + 1
	if sc.GetAgentId() != "alice" || sc.GetScore() != 2 || c.GetAdminCalls() != 2 || c.GetActiveDays() != 2 || c.GetTools() != 2 ||
		sc.GetWindow().GetDays() != 30 || sc.GetHead().GetSeq() != 4 || sc.GetFormula() != reputation.Formula {
		t.Errorf("alice's score = %v, want 2 from 2 calls on 2 days with 2 tools in a 30-day window, at head 4", sc)
	}
	// Her ordinary calls count too: 18 succeeded, 2 refused, 1 failed.
	for i := range 21 {
		code := "ok"
		switch {
		case i < 2:
			code = "invalid_argument"
		case i == 2:
			code = "unavailable"
		}
		m.audit.outcome("alice", "tasks_create", code, now0.Add(-time.Hour))
	}
	m.audit.outcome("alice", "tasks_create", "ok", now0.Add(-40*24*time.Hour)) // before the window
	res, err = m.client.Check(servertest.As(t.Context(), "alice"), &reputationv1.CheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	sc, c = res.GetScore(), res.GetScore().GetComponents()
	// v = 21/100: 40×v×18/20 + 20×v×(1−2/21) + 10×v + 0.2 + 0.67 + 5×3/10
	// = 7.56 + 3.8 + 2.1 + 0.2 + 0.67 + 1.5
	if c.GetCalls() != 21 || c.GetOkCalls() != 18 || c.GetRefusedCalls() != 2 || c.GetFailedCalls() != 1 || c.GetOutcomesThrough() != 22 ||
		c.GetTools() != 3 || sc.GetScore() != 16 {
		t.Errorf("alice's score with her calls = %v, want 16 from 21 calls (18 ok, 2 refused, 1 failed) through outcome 22", sc)
	}
	res, err = m.client.Check(servertest.As(t.Context(), "alice"), &reputationv1.CheckRequest{AgentId: "bob", WindowDays: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.GetScore(); got.GetAgentId() != "bob" || got.GetComponents().GetAdminCalls() != 1 || got.GetWindow().GetDays() != 1 {
		t.Errorf("bob's score over a day = %v, want 1 call", got)
	}
	if _, err := m.client.Check(servertest.As(t.Context(), "alice"), &reputationv1.CheckRequest{WindowDays: 366}); servertest.Code(t, err) != connect.CodeInvalidArgument {
		t.Errorf("a 366-day window: %v, want invalid_argument", err)
	}
}

func TestPublishedAttestationVerifies(t *testing.T) {
	a := newMesh(t, now0)
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	att := a.publish(t, "alice")
	if att.GetIssuer() != a.a2a.URL || att.GetScore().GetAgentId() != "alice" || att.GetCheckpoint().GetSeq() != 1 ||
		!att.GetExpiresAt().AsTime().Equal(now0.Add(reputation.DefaultTTL)) || att.GetUrl() != a.public+reputation.PublicPath+"alice" || att.GetJws() == "" {
		t.Fatalf("published attestation = %v", att)
	}
	got, err := a.client.GetAttestation(servertest.As(t.Context(), "anyone"), &reputationv1.GetAttestationRequest{AgentId: "alice"})
	if err != nil || got.GetAttestation().GetJws() != att.GetJws() {
		t.Fatalf("get attestation = %v, %v; want the published one", got, err)
	}

	// Another mesh verifies it from alice's card, at its URL, and from a
	// card that names only its URL.
	b := newMesh(t, now0.Add(time.Hour))
	res := verify(t, b, a.cardURL("alice"))
	if !res.GetVerified() || res.GetSource() != reputationv1.Source_SOURCE_CARD || !res.GetSignatureValid() || !res.GetIssuerMatchesCard() ||
		!res.GetFresh() || !res.GetCheckpointSigned() || len(res.GetReasons()) != 0 || res.GetAttestation().GetScore().GetScore() != att.GetScore().GetScore() {
		t.Errorf("verify alice's card = %v, want verified from the card", res)
	}
	res = verify(t, b, att.GetUrl())
	if !res.GetVerified() || res.GetSource() != reputationv1.Source_SOURCE_ATTESTATION_URL || res.GetIssuerMatchesCard() || !res.GetSignatureValid() {
		t.Errorf("verify the attestation URL = %v, want verified, bound to no card", res)
	}

	// Retrying the publish with its key answers the first attestation,
	// even after the trail moved on.
	ctx := servertest.WithIdempotencyKey(servertest.As(t.Context(), "alice"), "pub-1")
	first, err := a.client.PublishAttestation(ctx, &reputationv1.PublishAttestationRequest{TtlHours: 2})
	if err != nil {
		t.Fatal(err)
	}
	a.audit.add("alice", "agents_register", now0.Add(-time.Minute))
	again, err := a.client.PublishAttestation(ctx, &reputationv1.PublishAttestationRequest{TtlHours: 2})
	if err != nil || again.GetAttestation().GetJws() != first.GetAttestation().GetJws() {
		t.Errorf("retried publish = %v, %v; want the first attestation", again, err)
	}
	if _, err := a.client.PublishAttestation(ctx, &reputationv1.PublishAttestationRequest{TtlHours: 3}); servertest.Code(t, err) != connect.CodeAlreadyExists {
		t.Errorf("the key with another request: %v, want conflict", err)
	}
}

func TestForgedStaleAndResignedAttestationsAreRefused(t *testing.T) {
	a := newMesh(t, now0)
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	att := a.publish(t, "alice")
	b := newMesh(t, now0)

	serve := func(jws string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_ = json.NewEncoder(w).Encode(map[string]string{"jws": jws})
		}))
		t.Cleanup(srv.Close)
		return srv.URL + "/attestation"
	}
	refused := func(name string, res *reputationv1.VerifyResponse, reason string) {
		t.Helper()
		if res.GetVerified() || !slices.ContainsFunc(res.GetReasons(), func(r string) bool { return strings.Contains(r, reason) }) {
			t.Errorf("%s: verify = %v, want refused for %q", name, res, reason)
		}
	}

	// Forged: the score raised in the signed payload.
	parts := strings.Split(att.GetJws(), ".")
	var payload map[string]any
	raw, _ := jwsDecode(parts[1])
	_ = json.Unmarshal(raw, &payload)
	payload["reputation"].(map[string]any)["score"] = 100
	forged, _ := json.Marshal(payload)
	res := verify(t, b, serve(parts[0]+"."+jwsEncode(forged)+"."+parts[2]))
	refused("forged", res, "does not verify")
	if res.GetSignatureValid() || !res.GetFresh() {
		t.Errorf("forged: %v, want an invalid signature on a fresh attestation", res)
	}

	// Re-signed by another key under the same issuer.
	other, _ := keyfile.Generate()
	resigner, err := reputation.NewSigner(other, a.a2a.URL)
	if err != nil {
		t.Fatal(err)
	}
	copied := clone(att)
	copied.GetScore().Score = 100
	if err := resigner.Sign(copied); err != nil {
		t.Fatal(err)
	}
	refused("re-signed", verify(t, b, serve(copied.GetJws())), "does not publish")

	// Stale: verified a day and a half after it was issued for a day.
	later := newMesh(t, now0.Add(36*time.Hour))
	res = verify(t, later, att.GetUrl())
	refused("expired", res, "expired")
	if !res.GetSignatureValid() || res.GetFresh() {
		t.Errorf("expired: %v, want a valid signature on a stale attestation", res)
	}
	// Older than the verifier accepts, though not expired.
	b.now = now0.Add(90 * time.Minute)
	res, err = b.client.Verify(servertest.As(t.Context(), "verifier"), &reputationv1.VerifyRequest{Url: att.GetUrl(), MaxAgeHours: 1})
	if err != nil {
		t.Fatal(err)
	}
	refused("older than max age", res, "more than 1h0m0s ago")
	b.now = now0

	// Wrong issuer: mesh C's valid attestation on mesh A's card.
	c := newMesh(t, now0)
	c.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	cAtt := c.publish(t, "alice")
	a.cardExt = false
	card := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"capabilities": map[string]any{"extensions": []any{
			map[string]any{"uri": reputation.Extension, "params": map[string]any{"attestation": map[string]any{"jws": cAtt.GetJws()}}}}}})
	}))
	t.Cleanup(card.Close)
	res = verify(t, b, card.URL+"/a2a/agents/alice/.well-known/agent-card.json")
	refused("wrong issuer", res, "is not the mesh that serves the card")
	if !res.GetSignatureValid() || res.GetIssuerMatchesCard() {
		t.Errorf("wrong issuer: %v, want a valid signature not bound to the card", res)
	}

	// A card without the extension says so.
	refused("no extension", verify(t, b, a.cardURL("alice")), "declares no reputation extension")
}

// TestForgedCheckpointSignatureIsRefused: an attestation validly signed
// with the mesh key whose audit checkpoint was not signed by the audit key
// the issuer publishes (another key under the right name, or a changed
// note) is refused, with its reason; a mesh that publishes no audit key
// cannot have its checkpoints checked.
func TestForgedCheckpointSignatureIsRefused(t *testing.T) {
	b := newMesh(t, now0)
	checkpointRefused := func(name string, a *meshA, reason string) {
		t.Helper()
		res := verify(t, b, a.publish(t, "alice").GetUrl())
		if res.GetVerified() || res.GetCheckpointSigned() || !res.GetSignatureValid() ||
			!slices.ContainsFunc(res.GetReasons(), func(r string) bool { return strings.Contains(r, reason) }) {
			t.Errorf("%s: verify = %v, want a valid attestation refused because its checkpoint %q", name, res, reason)
		}
	}

	// The checkpoint signed by a key the issuer does not publish.
	a := newMesh(t, now0)
	published := a.audit.key
	a.audit.key, _ = keyfile.Generate()
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	a.audit.key = published
	checkpointRefused("unpublished key", a, "a key its issuer does not publish")

	// The note's seq and hash changed under the published key's signature.
	a = newMesh(t, now0)
	a.audit.add("alice", "credits_grant", now0.Add(-2*time.Hour))
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	cp := a.audit.checkpoint
	forged := strings.Replace(cp.GetNote(), "\n2\n"+cp.GetHash()+"\n", "\n1\n"+a.audit.records[0].GetHash()+"\n", 1)
	cp.Note, cp.Seq, cp.Hash = forged, 1, a.audit.records[0].GetHash()
	checkpointRefused("altered note", a, "does not verify")

	// No audit key published at all.
	a = newMesh(t, now0)
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	none := ""
	a.auditKeys.Store(&none)
	checkpointRefused("no published key", a, "audit checkpoint keys ("+a.a2a.URL+auditcheckpoint.KeysPath+") could not be read")

	// The mesh key published as if it were the audit key is not one.
	a = newMesh(t, now0)
	a.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	jwks, _ := json.Marshal(a2alink.Keys(a.key.Public().(ed25519.PublicKey)))
	asAudit := string(jwks)
	a.auditKeys.Store(&asAudit)
	checkpointRefused("mesh key as audit key", a, "not audit checkpoint verifier keys")
}

func TestPublishNeedsAnIntactTrailWithACheckpoint(t *testing.T) {
	m := newMesh(t, now0)
	ctx := servertest.As(t.Context(), "alice")
	if _, err := m.client.PublishAttestation(ctx, &reputationv1.PublishAttestationRequest{}); servertest.Code(t, err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("publish before any checkpoint: %v, want failed precondition", err)
	}
	m.audit.add("alice", "credits_grant", now0.Add(-time.Hour))
	m.audit.intact = false
	if _, err := m.client.PublishAttestation(ctx, &reputationv1.PublishAttestationRequest{}); servertest.Code(t, err) != connect.CodeFailedPrecondition ||
		!strings.Contains(err.Error(), "does not verify") {
		t.Errorf("publish from a broken trail: %v, want failed precondition", err)
	}
	if _, err := m.client.GetAttestation(ctx, &reputationv1.GetAttestationRequest{AgentId: "alice"}); servertest.Code(t, err) != connect.CodeNotFound {
		t.Errorf("get after refused publishes: %v, want not_found", err)
	}
}
