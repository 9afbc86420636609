package audit

import (
	"context"
	"errors"
	"iter"
	"time"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
)

// Store keeps the chain. Implementations live in auditstore (SQLite and
// PostgreSQL); what a record and its hash are is decided here.
type Store interface {
	// Append adds the next record. It holds the chain's lock from reading the
	// head checkpoint to writing the record and the new checkpoint, so
	// appends are serialised and the chain never forks. seal gets the next
	// sequence number and the head hash and returns the complete record.
	//
	// When callID was recorded before, Append writes nothing and returns that
	// record with replayed true. A missing head checkpoint is ErrHeadMissing;
	// a record already stored at the next position is ErrChainConflict.
	Append(ctx context.Context, callID string, seal func(seq int64, prevHash string) (*auditv1.Record, error)) (rec *auditv1.Record, replayed bool, err error)
	// List returns one page of the records that match f, newest first, and
	// how many match in all.
	List(ctx context.Context, f Filter, offset, limit int) ([]*auditv1.Record, int, error)
	// Head reads the head checkpoint, or ErrHeadMissing.
	Head(ctx context.Context) (*auditv1.Checkpoint, error)
	// Walk reads the head checkpoint (nil when it is missing) and the stored
	// records with seq >= from in ascending sequence order, from one
	// consistent snapshot, and hands them to visit. Records are read as they
	// are iterated, never all at once.
	Walk(ctx context.Context, from int64, visit func(head *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error) error
}

// Filter selects records for List; zero fields select everything.
type Filter struct {
	Actor string
	Tool  string
	// Since is inclusive, Until exclusive.
	Since, Until time.Time
}

// Store errors.
var (
	ErrHeadMissing   = errors.New("audit head checkpoint is missing")
	ErrChainConflict = errors.New("a record already exists past the audit head checkpoint")
)

// OutcomeStore keeps how every tool call ended (not part of the chain).
// The SQL store (auditstore) implements it beside Store.
type OutcomeStore interface {
	// RecordOutcomes stores the outcomes whose ids are new and says how
	// many were.
	RecordOutcomes(ctx context.Context, outcomes []*auditv1.CallOutcome) (int, error)
	// SummarizeOutcomes counts the outcomes f selects by tool and domain
	// code and their active days, and names the last position counted.
	SummarizeOutcomes(ctx context.Context, f OutcomeFilter) (*auditv1.SummarizeOutcomesResponse, error)
	// PruneOutcomes removes the outcomes older than before, then all but
	// the newest keep, and says how many it removed.
	PruneOutcomes(ctx context.Context, before time.Time, keep int64) (int64, error)
}

// OutcomeFilter selects one agent's outcomes for SummarizeOutcomes: Since
// inclusive, Until exclusive (zero: unbounded), up to position Through
// (0: the newest).
type OutcomeFilter struct {
	Agent        string
	Since, Until time.Time
	Through      int64
}
