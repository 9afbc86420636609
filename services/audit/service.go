// Package audit is the audit trail: an append-only, hash-chained record of
// every successful admin tool call, which anyone may list and verify.
//
// Each record's hash is the SHA-256 of the previous record's hash followed by
// the record's RFC 8785 canonical JSON (Canonical, ChainHash). A head
// checkpoint (the last sequence number and hash) is written in the same
// transaction as each record, so a cut-off tail shows too. Verify walks the
// whole chain and reports the first bad record.
//
// A chain alone cannot show everything: someone who can write the database
// and recomputes every later hash and the head row leaves a chain that checks
// out by itself, and so does a tail cut together with the head row. So the
// service also signs checkpoints of the head with a key of its own (package
// checkpoint) and publishes them outside the database: appended to a
// checkpoint log file that an operator ships elsewhere, and logged. Verify
// checks the chain against every signed checkpoint it is given or wrote: a
// chain shorter than one is truncated, a chain whose record at a
// checkpoint's position has another hash is forked.
package audit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	"github.com/toolmesh/toolmesh/internal/server"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Config tunes the service.
type Config struct {
	// Appenders are the mesh subjects that may call Append; only the edge
	// (audittrail.EdgeSubject) when empty.
	Appenders []string
	// Now is the clock; time.Now when nil.
	Now clock.Clock
	// Log receives the service's events; nothing is logged when nil.
	Log *slog.Logger
	// Signer signs checkpoints of the chain with the audit service's own
	// key. Without one no checkpoints are signed and only the chain and its
	// head row protect the trail.
	Signer *auditcheckpoint.Signer
	// CheckpointLog is the file every signed checkpoint is appended to;
	// with "" checkpoints are only logged (audit.checkpoint_signed).
	CheckpointLog string
	// CheckpointInterval is how often a checkpoint is signed besides the
	// ones after appends; DefaultCheckpointInterval when 0.
	CheckpointInterval time.Duration
	// OutcomeRetention is how long call outcomes are kept;
	// DefaultOutcomeRetention when 0.
	OutcomeRetention time.Duration
	// MaxOutcomes is how many call outcomes are kept at most, the newest;
	// DefaultMaxOutcomes when 0.
	MaxOutcomes int64
}

// Validate reports a setting out of its range. New takes a zero field as
// its default; a setting bound from a flag is a value, so Validate does not.
func (c Config) Validate() error {
	if c.CheckpointInterval < time.Second {
		return fmt.Errorf("audit: the checkpoint interval must be at least 1s, got %s", c.CheckpointInterval)
	}
	return nil
}

// Service implements toolmesh.audit.v1.AuditService.
type Service struct {
	store     Store
	appenders []string
	now       clock.Clock
	log       *slog.Logger
	cp        *checkpointer // nil without a signer
	outcomes  *outcomes     // nil when the store keeps no outcomes
}

var _ auditv1connect.AuditServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if len(cfg.Appenders) == 0 {
		cfg.Appenders = []string{audittrail.EdgeSubject}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, appenders: slices.Clone(cfg.Appenders), now: cfg.Now, log: cfg.Log, cp: newCheckpointer(store, cfg),
		outcomes: newOutcomes(store, cfg)}
}

// RunCheckpoints signs and publishes checkpoints until ctx ends: one at
// start, one after appends (many appends close together share one), one
// every CheckpointInterval, and a last one for the appends since the one
// before when ctx ends. Run it beside the server and stop it after the
// server stopped serving. Without a signer it returns at once.
func (s *Service) RunCheckpoints(ctx context.Context) {
	if s.cp != nil {
		s.cp.run(ctx)
	}
}

// Checkpoint signs and publishes a checkpoint of the head now. It refuses
// (ErrCheckpointRefused) when the chain no longer extends the last signed
// checkpoint.
func (s *Service) Checkpoint(ctx context.Context) (auditcheckpoint.Signed, error) {
	if s.cp == nil {
		return auditcheckpoint.Signed{}, errors.New("the audit service has no checkpoint signing key")
	}
	return s.cp.sign(ctx, true)
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(auditv1connect.AuditServiceName, auditv1connect.AuditServiceHandler(s), auditv1connect.NewAuditServiceHandler, auditv1.RegisterAuditServiceHandler)
}

// authorizeAppend is the one place that decides who may append: the
// caller's subject, from its signed mesh token, against the configured
// appenders (--appender; the edge by default).
func (s *Service) authorizeAppend(ctx context.Context) error {
	c := mesh.FromContext(ctx).Caller
	if c.Subject == "" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("appending to the audit trail needs an identified mesh caller"))
	}
	if !slices.Contains(s.appenders, c.Subject) {
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("%s may not append to the audit trail; only the edge records admin calls", c.Subject))
	}
	return nil
}

// requireCaller admits any identified caller to read the trail.
func requireCaller(ctx context.Context) error {
	if c := mesh.FromContext(ctx).Caller; c.Subject == "" && c.Agent == "" {
		return connect.NewError(connect.CodeUnauthenticated, errors.New("reading the audit trail needs an identified caller"))
	}
	return nil
}

// Append implements AuditService.Append.
func (s *Service) Append(ctx context.Context, req *auditv1.AppendRequest) (*auditv1.AppendResponse, error) {
	if err := s.authorizeAppend(ctx); err != nil {
		return nil, err
	}
	rec, replayed, err := s.store.Append(ctx, req.GetCallId(), func(seq int64, prevHash string) (*auditv1.Record, error) {
		// The time is taken under the chain's lock, so times never run
		// backwards along the chain (with a clock that does not).
		r := &auditv1.Record{
			Seq:        seq,
			Time:       timestamppb.New(s.now().UTC().Truncate(time.Millisecond)),
			Actor:      req.GetActor(),
			Tool:       req.GetTool(),
			Reason:     req.GetReason(),
			ArgsDigest: req.GetArgsDigest(),
			Outcome:    req.GetOutcome(),
			CallId:     req.GetCallId(),
			ReplayOf:   req.GetReplayOf(),
			PrevHash:   prevHash,
		}
		return r, Seal(r)
	})
	switch {
	case errors.Is(err, ErrHeadMissing), errors.Is(err, ErrChainConflict):
		boundary.LogRejection(ctx, s.log, boundary.AuditChain, []boundary.Violation{{Field: "head", Rule: "audit_chain.head", Message: err.Error()}})
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("cannot append: %w; the trail was changed outside the audit service, run audit_verify", err))
	case err != nil:
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("append audit record: %w", err))
	}
	if replayed && !sameCall(rec, req) {
		return nil, connect.NewError(connect.CodeAlreadyExists,
			fmt.Errorf("call %s is already recorded (record %d) with other contents", req.GetCallId(), rec.GetSeq()))
	}
	if !replayed {
		s.log.InfoContext(ctx, "audit.record_appended", "seq", rec.GetSeq(), "tool", rec.GetTool(), "actor", rec.GetActor(), "call_id", rec.GetCallId(),
			"outcome", protoenum.Word(rec.GetOutcome()))
		s.cp.notify()
	}
	return &auditv1.AppendResponse{Record: rec, Replayed: replayed}, nil
}

// sameCall reports whether a stored record says what req says.
func sameCall(r *auditv1.Record, req *auditv1.AppendRequest) bool {
	return r.GetActor() == req.GetActor() && r.GetTool() == req.GetTool() && r.GetReason() == req.GetReason() &&
		r.GetArgsDigest() == req.GetArgsDigest() && r.GetOutcome() == req.GetOutcome() && r.GetReplayOf() == req.GetReplayOf()
}

// List implements AuditService.List.
func (s *Service) List(ctx context.Context, req *auditv1.ListRequest) (*auditv1.ListResponse, error) {
	if err := requireCaller(ctx); err != nil {
		return nil, err
	}
	f := Filter{Actor: req.GetActor(), Tool: req.GetTool()}
	if t := req.GetSince(); t != nil {
		f.Since = t.AsTime()
	}
	if t := req.GetUntil(); t != nil {
		f.Until = t.AsTime()
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	list, total, err := s.store.List(ctx, f, offset, limit)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list audit records: %w", err))
	}
	return &auditv1.ListResponse{Records: list, Page: paging.New(offset, limit, total)}, nil
}

// Head implements AuditService.Head.
func (s *Service) Head(ctx context.Context, _ *auditv1.HeadRequest) (*auditv1.HeadResponse, error) {
	if err := requireCaller(ctx); err != nil {
		return nil, err
	}
	head, err := s.store.Head(ctx)
	if errors.Is(err, ErrHeadMissing) {
		return nil, connect.NewError(connect.CodeDataLoss, fmt.Errorf("the audit head checkpoint is missing; run audit_verify"))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("read audit head: %w", err))
	}
	return &auditv1.HeadResponse{Head: head}, nil
}

// Verify implements AuditService.Verify. The stored records are the
// audit_chain boundary: a bad chain is logged there once, and answered as a
// result (intact false and the first bad record), not as an error, because
// the verification itself succeeded.
func (s *Service) Verify(ctx context.Context, req *auditv1.VerifyRequest) (*auditv1.VerifyResponse, error) {
	if err := requireCaller(ctx); err != nil {
		return nil, err
	}
	ev := Evidence{Anchor: req.GetAnchor()}
	if s.cp != nil {
		var err error
		if ev.Checkpoints, ev.Rejected, err = s.cp.evidence(); err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
	}
	if text := req.GetCheckpoints(); text != "" {
		if s.cp == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this audit service signs no checkpoints, so it cannot check the ones given"))
		}
		valid, rejected, err := s.cp.verifier.Read(strings.NewReader(text), "request")
		if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		ev.Checkpoints, ev.Rejected = append(ev.Checkpoints, valid...), append(ev.Rejected, rejected...)
	}
	res, err := VerifyTrail(ctx, s.store, ev)
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	var vs []boundary.Violation
	if f := res.GetFirstBad(); f != nil {
		vs = append(vs, boundary.Violation{
			Field:   fmt.Sprintf("records[%d]", f.GetSeq()),
			Rule:    "audit_chain." + protoenum.Word(f.GetProblem()),
			Message: f.GetDetail(),
		})
	}
	for _, r := range res.GetRejectedCheckpoints() {
		vs = append(vs, boundary.Violation{
			Field:   "checkpoints[" + r.GetSource() + "]",
			Rule:    "audit_chain.checkpoint_" + protoenum.Word(r.GetProblem()),
			Message: r.GetDetail(),
		})
	}
	if len(vs) > 0 {
		boundary.LogRejection(ctx, s.log, boundary.AuditChain, vs)
	}
	return res, nil
}

// ListCheckpoints implements AuditService.ListCheckpoints: the checkpoint
// log as the service reads it (its file, and the last checkpoint it signed
// when the file lacks it), newest first.
func (s *Service) ListCheckpoints(ctx context.Context, req *auditv1.ListCheckpointsRequest) (*auditv1.ListCheckpointsResponse, error) {
	if err := requireCaller(ctx); err != nil {
		return nil, err
	}
	if s.cp == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("this audit service signs no checkpoints: it has no audit key"))
	}
	valid, rejected, err := s.cp.evidence()
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	var log []*auditv1.SignedCheckpoint
	seen := map[string]bool{}
	for _, c := range valid {
		// The signer's memory repeats the log's last line.
		if k := fmt.Sprintf("%d/%s/%d", c.Seq, c.Hash, c.Time.UnixNano()); !seen[k] {
			seen[k] = true
			log = append(log, SignedProto(c))
		}
	}
	// The log's order is the signing order; newest first.
	slices.Reverse(log)
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	res := &auditv1.ListCheckpointsResponse{Checkpoints: log[min(offset, len(log)):min(offset+limit, len(log))],
		Page: paging.New(offset, limit, len(log)), RejectedCount: int64(len(rejected))}
	for _, r := range rejected[:min(len(rejected), maxRejectedShown)] {
		res.Rejected = append(res.Rejected, &auditv1.RejectedCheckpoint{Source: r.Source, Problem: checkpointProblem(r.Problem), Detail: r.Detail, Note: r.Note})
	}
	return res, nil
}

// problemName is a problem in lower case without its prefix ("edited").
