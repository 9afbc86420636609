// Package invariants checks, after the fact, that the mesh's books hold —
// whatever was killed or frozen while they were written:
//
//   - every wallet's balance equals the sum of its ledger, and no ledger
//     row ever took a balance below zero (the running sum, row by row);
//   - the audit trail verifies against its signed checkpoints;
//   - every acknowledged write of a workload is present exactly once, and
//     every idempotency key had one side effect (one task, one message,
//     one ledger entry);
//   - every accepted owner ask and workflow run reached a final state, or
//     still waits with a deadline in the future;
//   - every A2A task's event log is whole: each seq from 1 to its version
//     once, the last status the task's own.
//
// It reads the domains' databases directly, read-only (SQLite files or
// PostgreSQL), so it runs on any data directory or database, the mesh up
// or down: `toolmesh check` (docs/faults.md) is its command line, and the
// chaos run calls that command once its workload has drained.
//
//	res, err := invariants.Check(ctx, invariants.Input{DBs: dbs, Acked: acked, Now: time.Now()})
//	invariants.Print(os.Stdout, res, faults)
//
// A violation names its key and the records that break the rule, and Print
// shows the faults injected around the moment of the records.
package invariants

import (
	"context"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/services/audit"
)

// DBs are the domains' databases the invariants read; a nil one is not
// checked (and each invariant that needs it is reported as skipped).
type DBs struct {
	Credits, Tasks, Messages, Memory, Owner, Workflows, RemoteAgents, Audit, EventLog *sqldb.DB
}

// Input is what one check reads.
type Input struct {
	DBs
	// AuditEvidence are the signed checkpoints the audit trail is verified
	// against.
	AuditEvidence audit.Evidence
	// Acked is the workload's log of acknowledged writes.
	Acked []chaoslog.Ack
	// Now is the moment a pending ask or a running workflow run must still
	// have its deadline after.
	Now time.Time
}

// Violation is one broken rule.
type Violation struct {
	Invariant string    // the rule, as Result.Checks names it
	Key       string    // the wallet, key, id or record the rule broke on
	Records   []string  // what the databases hold for it
	At        time.Time // when the records were written; zero when unknown
}

// Checked is how many things one invariant looked at, and how many broke
// it. Skipped is set when its database was not given.
type Checked struct {
	Invariant  string
	Items      int
	Violations int
	Skipped    bool
}

// Result is what a check found.
type Result struct {
	Checks     []Checked
	Violations []Violation
}

// Held reports whether every invariant that ran held.
func (r Result) Held() bool { return len(r.Violations) == 0 }

// The invariants, by the name a Result gives them.
const (
	LedgerBalances  = "wallet balance = sum of its ledger"
	NeverNegative   = "ledger never below zero, each balance_after its running sum"
	AuditVerifies   = "audit trail verifies against its checkpoints"
	AckedOnce       = "acknowledged write present exactly once"
	KeyOnce         = "one side effect per idempotency key"
	AsksEnded       = "accepted asks ended or wait with a future deadline"
	WorkflowRunsEnd = "workflow runs ended or wait with a future deadline"
	A2ALogsWhole    = "A2A task event logs whole, ending in the task's status"
	EventsRecorded  = "every change's event in its outbox or the event log"
	// WebhooksOwed: a subscription's cursor marks every event at or before
	// it delivered (or given up) and every later one of its type pending;
	// so each cursor lies within the log, and each acknowledged delivery
	// is one of the subscription's events after its cursor.
	WebhooksOwed = "every recorded event delivered or pending for its webhook subscriptions"
)

// Check runs every invariant whose database is given.
func Check(ctx context.Context, in Input) (Result, error) {
	var res Result
	steps := []struct {
		name string
		db   *sqldb.DB
		run  func(context.Context, Input, *tally) error
	}{
		{LedgerBalances, in.Credits, ledgerBalances},
		{NeverNegative, in.Credits, neverNegative},
		{AuditVerifies, in.Audit, auditVerifies},
		{KeyOnce, keyDB(in.DBs), keysOnce},
		{AckedOnce, keyDB(in.DBs), ackedOnce},
		{AsksEnded, in.Owner, asksEnded},
		{WorkflowRunsEnd, in.Workflows, runsEnded},
		{A2ALogsWhole, in.RemoteAgents, a2aLogs},
		{EventsRecorded, in.EventLog, eventsRecorded},
		{WebhooksOwed, in.EventLog, webhooksOwed},
	}
	for _, s := range steps {
		if s.db == nil {
			res.Checks = append(res.Checks, Checked{Invariant: s.name, Skipped: true})
			continue
		}
		tl := &tally{name: s.name}
		if err := s.run(ctx, in, tl); err != nil {
			return res, fmt.Errorf("check %q: %w", s.name, err)
		}
		res.Checks = append(res.Checks, Checked{Invariant: s.name, Items: tl.items, Violations: len(tl.found)})
		res.Violations = append(res.Violations, tl.found...)
	}
	return res, nil
}

// keyDB is any database the key and acknowledgement checks read, nil when
// none is given: they skip the domains whose database is missing.
func keyDB(d DBs) *sqldb.DB {
	for _, db := range []*sqldb.DB{d.Tasks, d.Messages, d.Credits, d.Memory, d.Owner, d.Workflows, d.RemoteAgents} {
		if db != nil {
			return db
		}
	}
	return nil
}

// tally counts what one invariant looked at and collects what broke it.
type tally struct {
	name  string
	items int
	found []Violation
}

func (t *tally) broke(key string, at time.Time, records ...string) {
	t.found = append(t.found, Violation{Invariant: t.name, Key: key, Records: records, At: at})
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
