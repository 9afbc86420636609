package audit_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit"
)

// attacker opens the raw database the way someone with file access would:
// the append-only guards and the fork guard are dropped first.
func attacker(t *testing.T, e *env) func(query string, args ...any) {
	t.Helper()
	on := ""
	if e.db.Dialect == sqldb.Postgres {
		on = " ON audit_records"
	}
	for _, q := range []string{
		`DROP TRIGGER audit_records_no_update` + on,
		`DROP TRIGGER audit_records_no_delete` + on,
		`DROP INDEX audit_records_prev_hash`,
	} {
		if _, err := e.db.Exec(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return func(query string, args ...any) {
		t.Helper()
		if _, err := e.db.Exec(t.Context(), query, args...); err != nil {
			t.Fatalf("tamper %q: %v", query, err)
		}
	}
}

// forge writes a record that is correctly sealed: a forger who knows the
// format and recomputes the hash.
func forge(t *testing.T, exec func(string, ...any), seq int64, prevHash string) *auditv1.Record {
	t.Helper()
	r := &auditv1.Record{
		Seq: seq, Time: timestamppb.New(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)), Actor: "mallory", Tool: "credits_grant",
		Reason: "forged", ArgsDigest: "sha256:" + audit.GenesisHash, Outcome: auditv1.Outcome_OUTCOME_SUCCEEDED,
		CallId: fmt.Sprintf("forged-%d", seq), PrevHash: prevHash,
	}
	if err := audit.Seal(r); err != nil {
		t.Fatal(err)
	}
	exec(`INSERT INTO audit_records (seq, time_ms, actor, tool, reason, args_digest, outcome, call_id, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		r.GetSeq(), r.GetTime().AsTime().UnixMilli(), r.GetActor(), r.GetTool(), r.GetReason(), r.GetArgsDigest(), int32(r.GetOutcome()),
		r.GetCallId(), r.GetPrevHash(), r.GetHash())
	return r
}

// shift renumbers the records from seq on by delta (the primary key forbids
// doing it in one statement).
func shift(exec func(string, ...any), from, delta int64) {
	exec(`UPDATE audit_records SET seq = -seq WHERE seq >= ?`, from)
	exec(`UPDATE audit_records SET seq = -seq + ? WHERE seq < 0`, delta)
}

func TestVerifyFindsTheFirstBadRecord(t *testing.T) {
	const n = 10
	cases := []struct {
		name    string
		tamper  func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record)
		seq     int64
		problem auditv1.Problem
	}{
		{"edited field", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET reason = 'nothing to see' WHERE seq = 4`)
		}, 4, auditv1.Problem_PROBLEM_EDITED},
		{"edited time", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET time_ms = time_ms - 1 WHERE seq = 7`)
		}, 7, auditv1.Problem_PROBLEM_EDITED},
		{"edited hash", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET hash = ? WHERE seq = 5`, audit.GenesisHash)
		}, 5, auditv1.Problem_PROBLEM_EDITED},
		{"deleted record", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = 4`)
		}, 4, auditv1.Problem_PROBLEM_MISSING},
		{"deleted first record", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = 1`)
		}, 1, auditv1.Problem_PROBLEM_MISSING},
		{"deleted record, the rest renumbered", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = 4`)
			shift(exec, 5, -1)
			exec(`UPDATE audit_head SET seq = seq - 1`)
		}, 4, auditv1.Problem_PROBLEM_BROKEN_LINK},
		{"inserted record, correctly sealed", func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record) {
			shift(exec, 4, 1)
			forge(t, exec, 4, recs[2].GetHash())
		}, 4, auditv1.Problem_PROBLEM_INSERTED},
		{"inserted first record", func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record) {
			shift(exec, 1, 1)
			forge(t, exec, 1, audit.GenesisHash)
		}, 1, auditv1.Problem_PROBLEM_INSERTED},
		{"inserted record with a made-up hash", func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record) {
			shift(exec, 4, 1)
			forge(t, exec, 4, recs[2].GetHash())
			exec(`UPDATE audit_records SET hash = ? WHERE seq = 4`, strings.Repeat("ab", 32))
		}, 4, auditv1.Problem_PROBLEM_EDITED},
		{"inserted past the head", func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record) {
			forge(t, exec, n+1, recs[n-1].GetHash())
		}, n + 1, auditv1.Problem_PROBLEM_BEYOND_HEAD},
		{"two records swapped", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET seq = -5 WHERE seq = 4`)
			exec(`UPDATE audit_records SET seq = 4 WHERE seq = 5`)
			exec(`UPDATE audit_records SET seq = 5 WHERE seq = -5`)
		}, 4, auditv1.Problem_PROBLEM_OUT_OF_ORDER},
		{"two distant records swapped", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET seq = -8 WHERE seq = 3`)
			exec(`UPDATE audit_records SET seq = 3 WHERE seq = 8`)
			exec(`UPDATE audit_records SET seq = 8 WHERE seq = -8`)
		}, 3, auditv1.Problem_PROBLEM_BROKEN_LINK},
		{"contents of two records swapped", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET reason = 'reason 7' WHERE seq = 6`)
			exec(`UPDATE audit_records SET reason = 'reason 6' WHERE seq = 7`)
		}, 6, auditv1.Problem_PROBLEM_EDITED},
		{"truncated tail", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq > 7`)
		}, 8, auditv1.Problem_PROBLEM_TRUNCATED},
		{"every record deleted", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records`)
		}, 1, auditv1.Problem_PROBLEM_TRUNCATED},
		{"last record replaced, correctly sealed", func(t *testing.T, exec func(string, ...any), recs []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = ?`, n)
			forge(t, exec, n, recs[n-2].GetHash())
		}, n, auditv1.Problem_PROBLEM_HEAD_MISMATCH},
		{"head checkpoint deleted", func(t *testing.T, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_head`)
		}, 0, auditv1.Problem_PROBLEM_HEAD_MISSING},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
				recs := appendN(t, e, n)
				tc.tamper(t, attacker(t, e), recs)
				res := verify(t, e, nil)
				f := res.GetFirstBad()
				if res.GetIntact() || f.GetSeq() != tc.seq || f.GetProblem() != tc.problem {
					t.Fatalf("verify = intact %v, first bad %v; want record %d: %v", res.GetIntact(), f, tc.seq, tc.problem)
				}
				if f.GetDetail() == "" {
					t.Error("the finding does not say what is wrong")
				}
				if want := max(tc.seq-1, 0); tc.problem != auditv1.Problem_PROBLEM_BEYOND_HEAD && tc.problem != auditv1.Problem_PROBLEM_HEAD_MISMATCH &&
					tc.problem != auditv1.Problem_PROBLEM_HEAD_MISSING && res.GetVerifiedRecords() != want {
					t.Errorf("verified_records = %d, want %d (the records before the bad one)", res.GetVerifiedRecords(), want)
				}
				if got := boundaryEvents(e.log); got != 1 {
					t.Errorf("%d boundary.validation_failed events at audit_chain, want exactly 1", got)
				}
			})
		})
	}
}

func TestAnchorCatchesARewrittenTrail(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 6)
		head := verify(t, e, nil).GetHead()
		if head.GetSeq() != 6 {
			t.Fatalf("head = %v, want record 6", head)
		}
		if res := verify(t, e, head); !res.GetIntact() {
			t.Fatalf("verify with its own head as anchor = %v, want intact", res)
		}

		// Rewrite from record 3 on, recomputing every hash and the head: the
		// chain checks out by itself, which is the documented limit.
		exec := attacker(t, e)
		exec(`DELETE FROM audit_records WHERE seq >= 3`)
		prev := recs[1].GetHash()
		for seq := int64(3); seq <= 6; seq++ {
			prev = forge(t, exec, seq, prev).GetHash()
		}
		exec(`UPDATE audit_head SET hash = ? WHERE id = 1`, prev)
		if res := verify(t, e, nil); !res.GetIntact() {
			t.Fatalf("a fully rewritten tail with its head: %v; the chain alone cannot tell, want intact", res)
		}
		res := verify(t, e, head)
		if f := res.GetFirstBad(); res.GetIntact() || f.GetSeq() != 6 || f.GetProblem() != auditv1.Problem_PROBLEM_ANCHOR_MISMATCH {
			t.Errorf("verify with the old head as anchor = %v, want record 6: anchor mismatch", res)
		}
		// An anchor before the rewrite still holds.
		if res := verify(t, e, &auditv1.Checkpoint{Seq: 2, Hash: recs[1].GetHash()}); !res.GetIntact() {
			t.Errorf("anchor at record 2, before the rewrite = %v, want intact", res)
		}
	})
}

func TestAnchorCatchesATruncationWithTheHeadRolledBack(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 6)
		anchor := &auditv1.Checkpoint{Seq: 6, Hash: recs[5].GetHash()}
		exec := attacker(t, e)
		exec(`DELETE FROM audit_records WHERE seq > 4`)
		exec(`UPDATE audit_head SET seq = 4, hash = ? WHERE id = 1`, recs[3].GetHash())
		if res := verify(t, e, nil); !res.GetIntact() {
			t.Fatalf("truncated with the head rolled back = %v; the chain alone cannot tell, want intact", res)
		}
		res := verify(t, e, anchor)
		if f := res.GetFirstBad(); res.GetIntact() || f.GetSeq() != 5 || f.GetProblem() != auditv1.Problem_PROBLEM_ANCHOR_MISMATCH {
			t.Errorf("verify with anchor at record 6 = %v, want record 5: anchor mismatch", res)
		}
	})
}

func TestAppendAfterTamperingDoesNotHideIt(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		appendN(t, e, 10)
		attacker(t, e)(`DELETE FROM audit_records WHERE seq > 7`)
		res, err := e.c.Append(asEdge(), appendReq(11))
		if err != nil {
			t.Fatalf("append after truncation: %v", err)
		}
		if res.GetRecord().GetSeq() != 11 {
			t.Errorf("append after truncation got seq %d, want 11: it must continue from the head checkpoint", res.GetRecord().GetSeq())
		}
		if f := verify(t, e, nil).GetFirstBad(); f.GetSeq() != 8 || f.GetProblem() != auditv1.Problem_PROBLEM_MISSING {
			t.Errorf("verify after truncation and append = %v, want record 8 missing", f)
		}
	})
}

func TestAppendRefusesARecordPastTheHead(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 3)
		exec := attacker(t, e)
		forge(t, exec, 4, recs[2].GetHash())
		before := boundaryEvents(e.log)
		_, err := e.c.Append(asEdge(), appendReq(4))
		if servertest.Code(t, err) != connect.CodeDataLoss {
			t.Fatalf("append onto a record past the head: code %v (%v), want data_loss", connect.CodeOf(err), err)
		}
		if !strings.Contains(err.Error(), "audit_verify") {
			t.Errorf("error %q does not tell the operator to verify", err)
		}
		if got := boundaryEvents(e.log) - before; got != 1 {
			t.Errorf("%d boundary.validation_failed events at audit_chain, want 1", got)
		}
	})
}

func TestRecordsAreAppendOnlyInTheDatabase(t *testing.T) {
	startEach(t, audit.Config{}, func(t *testing.T, e *env) {
		appendN(t, e, 2)
		for _, q := range []string{
			`UPDATE audit_records SET reason = 'x' WHERE seq = 1`,
			`DELETE FROM audit_records WHERE seq = 2`,
		} {
			if _, err := e.db.Exec(t.Context(), q); err == nil || !strings.Contains(err.Error(), "append-only") {
				t.Errorf("%s: err = %v, want the append-only guard to refuse it", q, err)
			}
		}
		if res := verify(t, e, nil); !res.GetIntact() {
			t.Errorf("after refused edits verify = %v, want intact", res)
		}
	})
}
