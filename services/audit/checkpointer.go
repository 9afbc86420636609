package audit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/protoenum"
)

// DefaultCheckpointInterval is how often a checkpoint is signed when no
// append asks for one.
const DefaultCheckpointInterval = 10 * time.Minute

// finalCheckpointTimeout bounds the checkpoint signed when the loop stops.
const finalCheckpointTimeout = 10 * time.Second

// ErrCheckpointRefused is returned when the chain no longer extends the
// last signed checkpoint: the signer does not sign a trail that was cut or
// rewritten behind its back.
var ErrCheckpointRefused = errors.New("audit checkpoint refused")

// checkpointer signs checkpoints of the chain's head and publishes them:
// appended to the checkpoint log file and logged as an audit.checkpoint_signed
// event. It signs only a head that extends the last checkpoint it signed
// (the record there still has its hash, every record after it checks out,
// and the chain ends at the head row), so it never vouches for a trail that
// was changed outside the service.
type checkpointer struct {
	store    Store
	signer   *auditcheckpoint.Signer
	verifier *auditcheckpoint.Verifier
	path     string // "" when no file is written
	interval time.Duration
	now      clock.Clock
	log      *slog.Logger
	// kick asks the loop for a checkpoint; its one slot coalesces the asks
	// of many appends into one checkpoint.
	kick chan struct{}

	mu     sync.Mutex // serialises signing and reading the log file
	loaded bool       // last was read from the log file
	last   *auditcheckpoint.Signed
	// signed, when set (by tests), sees each checkpoint once published.
	signed func(auditcheckpoint.Signed)
}

func newCheckpointer(store Store, cfg Config) *checkpointer {
	if cfg.Signer == nil {
		return nil
	}
	if cfg.CheckpointInterval <= 0 {
		cfg.CheckpointInterval = DefaultCheckpointInterval
	}
	return &checkpointer{
		store: store, signer: cfg.Signer, verifier: cfg.Signer.Verifier(), path: cfg.CheckpointLog,
		interval: cfg.CheckpointInterval, now: cfg.Now, log: cfg.Log, kick: make(chan struct{}, 1),
	}
}

// notify asks for a checkpoint soon, without waiting.
func (c *checkpointer) notify() {
	if c == nil {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default: // one is already asked for; it will cover this append too
	}
}

// run signs a checkpoint at start, after appends (coalesced) and every
// interval, until ctx ends; then once more for the appends since the last.
func (c *checkpointer) run(ctx context.Context) {
	c.try(ctx, true)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalCheckpointTimeout)
			c.try(fctx, false)
			cancel()
			return
		case <-t.C:
			c.try(ctx, true)
		case <-c.kick:
			c.try(ctx, false)
		}
	}
}

// try signs one checkpoint; what goes wrong is logged where it happens.
func (c *checkpointer) try(ctx context.Context, always bool) {
	if _, err := c.sign(ctx, always); err != nil && !errors.Is(err, ErrCheckpointRefused) {
		c.log.ErrorContext(ctx, "audit.checkpoint_failed", "error", err.Error())
	}
}

// sign signs and publishes a checkpoint of the head, if the head extends
// the last checkpoint. Unless always, a head that has not moved since the
// last checkpoint is not signed again (the last one is returned).
func (c *checkpointer) sign(ctx context.Context, always bool) (auditcheckpoint.Signed, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.load(); err != nil {
		return auditcheckpoint.Signed{}, err
	}
	head, f, err := c.extends(ctx)
	if err != nil {
		return auditcheckpoint.Signed{}, err
	}
	if f != nil {
		from := int64(0)
		if c.last != nil {
			from = c.last.Seq
		}
		c.log.ErrorContext(ctx, "audit.checkpoint_refused", "last_checkpoint_seq", from, "seq", f.GetSeq(),
			"problem", protoenum.Word(f.GetProblem()), "detail", f.GetDetail(),
			"message", "the trail no longer extends the last signed checkpoint; run audit_verify or toolmesh audit verify")
		return auditcheckpoint.Signed{}, fmt.Errorf("%w: %s", ErrCheckpointRefused, f.GetDetail())
	}
	if l := c.last; !always && l != nil && l.Seq == head.GetSeq() && l.Hash == head.GetHash() {
		return *l, nil
	}
	s, err := c.signer.Sign(head.GetSeq(), head.GetHash(), c.now())
	if err != nil {
		return auditcheckpoint.Signed{}, err
	}
	c.last = &s
	c.log.InfoContext(ctx, "audit.checkpoint_signed", "seq", s.Seq, "hash", s.Hash, "origin", s.Origin, "note", s.Note)
	if c.path != "" {
		if err := auditcheckpoint.Append(c.path, s.Note); err != nil {
			return s, err
		}
		s.Source = filepath.Base(c.path)
	}
	if c.signed != nil {
		c.signed(s)
	}
	return s, nil
}

// load reads the last checkpoint this signer wrote to the log file, once.
func (c *checkpointer) load() error {
	if c.loaded || c.path == "" {
		c.loaded = true
		return nil
	}
	valid, rejected, err := c.verifier.ReadFile(c.path, filepath.Base(c.path))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("read checkpoint log: %w", err)
	default:
		if len(rejected) > 0 {
			c.log.Warn("audit.checkpoint_log_rejected", "rejected", len(rejected), "first", rejected[0].Source,
				"message", "the checkpoint log holds checkpoints that do not verify with the audit key; run audit_verify")
		}
		if len(valid) > 0 {
			c.last = &valid[len(valid)-1]
		}
	}
	c.loaded = true
	return nil
}

// extends walks the chain from the last checkpoint's record on and checks
// that it still extends that checkpoint up to the head row. It returns the
// head, or what is wrong.
func (c *checkpointer) extends(ctx context.Context) (*auditv1.Checkpoint, *auditv1.Finding, error) {
	from, prev := int64(0), GenesisHash
	if c.last != nil {
		from, prev = c.last.Seq, c.last.Hash
	}
	var (
		head *auditv1.Checkpoint
		f    *auditv1.Finding
	)
	err := c.store.Walk(ctx, from, func(h *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error {
		head = h
		ch := newChecker(h, nil, nil)
		ch.expect, ch.prev = from+1, prev
		found := from == 0 // the empty chain is always there
		for r, err := range records {
			if err != nil {
				return err
			}
			if !found {
				switch {
				case r.GetSeq() != from:
					f = bad(from, auditv1.Problem_PROBLEM_MISSING, "record %d, which the last signed checkpoint names, is gone", from)
				case r.GetHash() != prev:
					f = bad(from, auditv1.Problem_PROBLEM_FORKED, "record %d has hash %s but the last signed checkpoint says %s", from, r.GetHash(), prev)
				}
				if f != nil {
					return nil
				}
				found = true
				continue
			}
			if f = ch.next(r); f != nil {
				return nil
			}
		}
		if !found {
			f = bad(from, auditv1.Problem_PROBLEM_TRUNCATED, "record %d, which the last signed checkpoint names, is gone", from)
			return nil
		}
		f = ch.end()
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read audit trail: %w", err)
	}
	return head, f, nil
}

// evidence returns the checkpoints of the log file and the last one signed
// (the signer's memory: it holds even when the file was cut).
func (c *checkpointer) evidence() (valid []auditcheckpoint.Signed, rejected []auditcheckpoint.Rejected, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path != "" {
		valid, rejected, err = c.verifier.ReadFile(c.path, filepath.Base(c.path))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("read checkpoint log: %w", err)
		}
	}
	if c.last != nil {
		mem := *c.last
		mem.Source = "memory"
		valid = append(valid, mem)
	}
	return valid, rejected, nil
}
