// Package reputation is the reputation domain: an agent's score from the
// mesh's audit trail, attestations of it signed with the mesh key, and the
// verification of attestations other meshes publish.
//
// The score (Compute, Formula) counts the agent's call outcomes and the
// audit records whose actor is the agent over a window, read through the
// audit service as the caller, up to the audit head and outcome position
// named beside it: anyone who can read them recomputes it. An attestation (Signer) is a compact JWS of the score, the window, the
// audit head and the latest signed audit checkpoint, issued by the mesh's
// A2A base URL, where the mesh publishes the key's public half at
// /.well-known/jwks.json; it is served to other meshes on the agent's A2A
// card (the card_extension option of reputation_get_attestation) and at a
// public URL of this service (PublicHandler). Verify reads another mesh's
// through the egress guard and says what held.
package reputation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1/reputationv1connect"
)

// GapSigner names what publishing lacks on a mesh without an issuer.
const GapSigner = "reputation_issuer"

// PublicPath is where the service serves an agent's attestation to anyone
// (PublicHandler), below its public URL.
const PublicPath = "/reputation/attestations/"

// Config configures the service.
type Config struct {
	// Audit reads the audit trail, as the caller of each call.
	Audit auditv1connect.AuditServiceClient
	// Signer signs attestations; nil: publishing answers capability_gap.
	Signer *Signer
	// PublicURL is this service's base URL as other meshes reach it; an
	// attestation's url is PublicURL + PublicPath + agent. Empty: none.
	PublicURL string
	// Egress guards what Verify fetches.
	Egress egress.Policy
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events; discarded when nil.
	Log *slog.Logger
}

// Service implements toolmesh.reputation.v1.ReputationService.
type Service struct {
	store  Store
	audit  auditv1connect.AuditServiceClient
	signer *Signer
	public string
	fetch  *fetcher
	now    clock.Clock
	log    *slog.Logger
}

var _ reputationv1connect.ReputationServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, audit: cfg.Audit, signer: cfg.Signer, public: strings.TrimRight(cfg.PublicURL, "/"),
		fetch: newFetcher(cfg.Egress), now: cfg.Now, log: cfg.Log}
}

// Registration is the service for server.New, with its public route.
func (s *Service) Registration() server.Service {
	r := server.Register(reputationv1connect.ReputationServiceName, reputationv1connect.ReputationServiceHandler(s), reputationv1connect.NewReputationServiceHandler,
		reputationv1.RegisterReputationServiceHandler)
	r.Public = map[string]http.Handler{"GET " + PublicPath + "{agent}": http.HandlerFunc(s.servePublic)}
	return r
}

func windowDays(n int32) int {
	if n == 0 {
		return DefaultWindowDays
	}
	return int(n)
}

// Check implements reputation_check.
func (s *Service) Check(ctx context.Context, req *reputationv1.CheckRequest) (*reputationv1.CheckResponse, error) {
	agent := req.GetAgentId()
	if agent == "" {
		var err error
		if agent, err = mesh.RequireAgent(ctx); err != nil {
			return nil, err
		}
	}
	head, err := s.audit.Head(ctx, &auditv1.HeadRequest{})
	if err != nil {
		return nil, auditError("read the audit head", err)
	}
	sc, err := s.score(ctx, agent, windowDays(req.GetWindowDays()), head.GetHead())
	if err != nil {
		return nil, err
	}
	return &reputationv1.CheckResponse{Score: sc}, nil
}

// score computes agent's score over the days before now from the audit
// records up to head.
func (s *Service) score(ctx context.Context, agent string, days int, head *auditv1.Checkpoint) (*reputationv1.Score, error) {
	until := s.now().UTC().Truncate(time.Millisecond)
	since := until.Add(-time.Duration(days) * 24 * time.Hour)
	var records []*auditv1.Record
	truncated := false
	for offset := int32(0); ; {
		res, err := s.audit.List(ctx, &auditv1.ListRequest{Actor: agent, Since: timestamppb.New(since), Until: timestamppb.New(until),
			Offset: offset, Limit: 200})
		if err != nil {
			return nil, auditError("read the audit trail", err)
		}
		for _, r := range res.GetRecords() {
			if r.GetSeq() <= head.GetSeq() {
				records = append(records, r)
			}
		}
		next := res.GetPage().GetNextOffset()
		if next == 0 || len(res.GetRecords()) == 0 {
			break
		}
		if len(records) >= MaxRecords {
			records, truncated = records[:MaxRecords], true
			break
		}
		offset = next
	}
	outcomes, err := s.audit.SummarizeOutcomes(ctx, &auditv1.SummarizeOutcomesRequest{Agent: agent,
		Since: timestamppb.New(since), Until: timestamppb.New(until)})
	if err != nil {
		return nil, auditError("read the call outcomes", err)
	}
	score, comps := Compute(records, outcomes, days, truncated)
	return &reputationv1.Score{
		AgentId: agent, Score: score, Formula: Formula, Components: comps,
		Window: &reputationv1.Window{Since: timestamppb.New(since), Until: timestamppb.New(until), Days: int32(days)},
		Head:   &reputationv1.AuditHead{Seq: head.GetSeq(), Hash: head.GetHash()},
	}, nil
}

// auditError is a failure to read the audit trail: unavailable when the
// audit service is, internal otherwise (its refusal of our request is not
// the caller's fault).
func auditError(what string, err error) error {
	switch connect.CodeOf(err) {
	case connect.CodeUnavailable, connect.CodeDeadlineExceeded, connect.CodeCanceled:
		return connect.NewError(connect.CodeOf(err), fmt.Errorf("%s: the audit service is unavailable; try again", what))
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return connect.NewError(connect.CodeOf(err), fmt.Errorf("%s: %w", what, err))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// PublishAttestation implements reputation_publish_attestation.
func (s *Service) PublishAttestation(ctx context.Context, req *reputationv1.PublishAttestationRequest) (*reputationv1.PublishAttestationResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	if s.signer == nil {
		return nil, mesh.NewCapabilityGapError(GapSigner, errors.New("this mesh issues no attestations: its A2A URL (TOOLMESH_A2A_URL) "+
			"and mesh key must be configured for the reputation service"))
	}
	call := idempotency.CallOf(ctx, req)
	if call.Key != "" {
		// A retry answers the first attestation, whatever the trail says
		// since.
		prev, err := s.store.Replay(ctx, agent, call)
		switch {
		case err == nil:
			idempotency.MarkReplay(ctx, call.Key)
			return &reputationv1.PublishAttestationResponse{Attestation: prev}, nil
		case errors.Is(err, idempotency.ErrKeyReused):
			return nil, idempotency.KeyConflict(call.Key)
		case !errors.Is(err, ErrNotFound):
			return nil, err
		}
	}
	v, err := s.audit.Verify(ctx, &auditv1.VerifyRequest{})
	if err != nil {
		return nil, auditError("verify the audit trail", err)
	}
	if !v.GetIntact() {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the audit trail does not verify (audit_verify says where): no attestation is issued from it"))
	}
	cp := v.GetCheckpoint()
	if cp == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("the audit service has signed no checkpoint yet; try again after its next checkpoint"))
	}
	sc, err := s.score(ctx, agent, windowDays(req.GetWindowDays()), v.GetHead())
	if err != nil {
		return nil, err
	}
	ttl := DefaultTTL
	if req.GetTtlHours() > 0 {
		ttl = time.Duration(req.GetTtlHours()) * time.Hour
	}
	issued := sc.GetWindow().GetUntil().AsTime().Truncate(time.Second)
	a := &reputationv1.Attestation{
		AgentId: agent,
		Score:   sc,
		Checkpoint: &reputationv1.AuditCheckpoint{Origin: cp.GetOrigin(), Seq: cp.GetSeq(), Hash: cp.GetHash(),
			Time: cp.GetTime(), Note: cp.GetNote()},
		IssuedAt:  timestamppb.New(issued),
		ExpiresAt: timestamppb.New(issued.Add(ttl)),
	}
	if s.public != "" {
		a.Url = s.public + PublicPath + agent
	}
	if err := s.signer.Sign(a); err != nil {
		return nil, err
	}
	stored, created, err := s.store.Publish(ctx, a, call)
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(call.Key)
	}
	if err != nil {
		return nil, err
	}
	if !created {
		idempotency.MarkReplay(ctx, call.Key)
	} else {
		s.log.InfoContext(ctx, "reputation.attestation_published", "agent", agent, "score", sc.GetScore(),
			"audit_seq", sc.GetHead().GetSeq(), "checkpoint_seq", cp.GetSeq(), "expires_at", a.GetExpiresAt().AsTime())
	}
	return &reputationv1.PublishAttestationResponse{Attestation: stored}, nil
}

// GetAttestation implements reputation_get_attestation: attestations are
// public, so any identified caller reads any agent's.
func (s *Service) GetAttestation(ctx context.Context, req *reputationv1.GetAttestationRequest) (*reputationv1.GetAttestationResponse, error) {
	a, err := s.store.Get(ctx, req.GetAgentId())
	if errors.Is(err, ErrNotFound) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("agent %s has published no attestation", req.GetAgentId()))
	}
	if err != nil {
		return nil, err
	}
	return &reputationv1.GetAttestationResponse{Attestation: a}, nil
}

// ListAttestations implements reputation_list_attestations.
func (s *Service) ListAttestations(ctx context.Context, req *reputationv1.ListAttestationsRequest) (*reputationv1.ListAttestationsResponse, error) {
	limit := paging.Limit(req.GetLimit())
	as, total, err := s.store.List(ctx, int(req.GetOffset()), limit)
	if err != nil {
		return nil, err
	}
	return &reputationv1.ListAttestationsResponse{Attestations: as, Page: paging.New(int(req.GetOffset()), limit, total)}, nil
}
