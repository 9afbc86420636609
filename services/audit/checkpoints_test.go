package audit_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

func newSigner(t *testing.T) *auditcheckpoint.Signer {
	t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return auditcheckpoint.NewSigner(key)
}

// signNow has the service sign a checkpoint of its head.
func signNow(t *testing.T, e *env) auditcheckpoint.Signed {
	t.Helper()
	s, err := e.svc.Checkpoint(context.Background())
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	return s
}

// notes reads the service's checkpoint log as it is on disk.
func notes(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantProof checks that f carries a signed checkpoint of record seq whose
// note verifies with pub on its own.
func wantProof(t *testing.T, f *auditv1.Finding, seq int64, pub ed25519.PublicKey) {
	t.Helper()
	p := f.GetCheckpoint()
	if p == nil {
		t.Fatalf("finding %v carries no signed checkpoint", f)
	}
	c, err := auditcheckpoint.NewVerifier(pub).Open(p.GetNote())
	if err != nil {
		t.Fatalf("the proving checkpoint does not verify on its own: %v\n%s", err, p.GetNote())
	}
	if p.GetSeq() != seq || c.Seq != seq || c.Hash != p.GetHash() || p.GetSource() == "" {
		t.Errorf("proving checkpoint = record %d (note: %d %s) from %q, want record %d as signed", p.GetSeq(), c.Seq, c.Hash, p.GetSource(), seq)
	}
}

// TestCheckpointsCatchEveryTamperKind tampers with a trail of 10 records
// that has signed checkpoints at records 5 and 10, the way someone with
// write access to the database (but not the signing key) would, and checks
// what verify reports.
func TestCheckpointsCatchEveryTamperKind(t *testing.T) {
	const n = 10
	type tamper func(t *testing.T, e *env, exec func(string, ...any), recs []*auditv1.Record)
	// rewrite replaces records from..n with correctly sealed forgeries and
	// points the head row at the last: the chain checks out by itself.
	rewrite := func(from, to int64) tamper {
		return func(t *testing.T, _ *env, exec func(string, ...any), recs []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq >= ?`, from)
			prev := audit.GenesisHash
			if from > 1 {
				prev = recs[from-2].GetHash()
			}
			for seq := from; seq <= to; seq++ {
				prev = forge(t, exec, seq, prev).GetHash()
			}
			exec(`UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, to, prev)
		}
	}
	cases := []struct {
		name      string
		tamper    tamper
		seq       int64
		problem   auditv1.Problem
		proof     int64                       // the seq of the proving checkpoint; 0: none
		rejected  []auditv1.CheckpointProblem // checkpoints reported as untrustworthy
		chainOnly bool                        // the chain alone already tells
	}{
		{name: "edit", tamper: func(t *testing.T, _ *env, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET reason = 'nothing to see' WHERE seq = 4`)
		}, seq: 4, problem: auditv1.Problem_PROBLEM_EDITED, chainOnly: true},
		{name: "delete", tamper: func(t *testing.T, _ *env, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = 4`)
		}, seq: 4, problem: auditv1.Problem_PROBLEM_MISSING, chainOnly: true},
		{name: "insert", tamper: func(t *testing.T, _ *env, exec func(string, ...any), recs []*auditv1.Record) {
			shift(exec, 4, 1)
			forge(t, exec, 4, recs[2].GetHash())
		}, seq: 4, problem: auditv1.Problem_PROBLEM_INSERTED, chainOnly: true},
		{name: "swap", tamper: func(t *testing.T, _ *env, exec func(string, ...any), _ []*auditv1.Record) {
			exec(`UPDATE audit_records SET seq = -5 WHERE seq = 4`)
			exec(`UPDATE audit_records SET seq = 4 WHERE seq = 5`)
			exec(`UPDATE audit_records SET seq = 5 WHERE seq = -5`)
		}, seq: 4, problem: auditv1.Problem_PROBLEM_OUT_OF_ORDER, chainOnly: true},
		{name: "truncate, head rewritten to the new last record", tamper: func(t *testing.T, _ *env, exec func(string, ...any), recs []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq = ?`, n)
			exec(`UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1`, n-1, recs[n-2].GetHash())
		}, seq: n, problem: auditv1.Problem_PROBLEM_TRUNCATED, proof: n},
		{name: "truncate past a checkpoint, head rewritten", tamper: func(t *testing.T, _ *env, exec func(string, ...any), recs []*auditv1.Record) {
			exec(`DELETE FROM audit_records WHERE seq > 3`)
			exec(`UPDATE audit_head SET seq = 3, hash = ? WHERE id = 1`, recs[2].GetHash())
		}, seq: 4, problem: auditv1.Problem_PROBLEM_TRUNCATED, proof: n},
		{name: "full rewrite without the signing key", tamper: rewrite(1, n), seq: 5, problem: auditv1.Problem_PROBLEM_FORKED, proof: 5},
		{name: "tail rewritten after the first checkpoint", tamper: rewrite(7, n), seq: n, problem: auditv1.Problem_PROBLEM_FORKED, proof: n},
		{name: "rewritten shorter", tamper: rewrite(1, 3), seq: 4, problem: auditv1.Problem_PROBLEM_TRUNCATED, proof: n},
		{name: "full rewrite and checkpoints forged", tamper: func(t *testing.T, e *env, exec func(string, ...any), recs []*auditv1.Record) {
			rewrite(1, n)(t, e, exec, recs)
			// The forger re-signs the new head: under the audit key's name
			// (its signature cannot verify) and under a key of its own.
			var newHead string
			if err := e.db.QueryRow(t.Context(), `SELECT hash FROM audit_head`).Scan(&newHead); err != nil {
				t.Fatal(err)
			}
			valid, _, err := e.signer.Verifier().ReadFile(e.checkpoints, "log")
			if err != nil {
				t.Fatal(err)
			}
			forged := strings.Replace(valid[len(valid)-1].Note, recs[n-1].GetHash(), newHead, 1)
			own, err := newSigner(t).Sign(n, newHead, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if err := auditcheckpoint.Append(e.checkpoints, forged); err != nil {
				t.Fatal(err)
			}
			if err := auditcheckpoint.Append(e.checkpoints, own.Note); err != nil {
				t.Fatal(err)
			}
		}, seq: 5, problem: auditv1.Problem_PROBLEM_FORKED, proof: 5,
			rejected: []auditv1.CheckpointProblem{auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_BAD_SIGNATURE, auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_UNKNOWN_KEY}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			signer := newSigner(t)
			startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
				recs := appendN(t, e, 5)
				signNow(t, e)
				recs = append(recs, appendRange(t, e, 6, n)...)
				signNow(t, e)
				if res := verify(t, e, nil); !res.GetIntact() || res.GetCheckpoint().GetSeq() != n || res.GetCheckpointsChecked() != 2 {
					t.Fatalf("before tampering verify = %v, want intact, checked against the checkpoints at 5 and %d", res, n)
				}
				tc.tamper(t, e, attacker(t, e), recs)
				res := verify(t, e, nil)
				f := res.GetFirstBad()
				if res.GetIntact() || f.GetSeq() != tc.seq || f.GetProblem() != tc.problem {
					t.Fatalf("verify = intact %v, first bad %v; want record %d: %v", res.GetIntact(), f, tc.seq, tc.problem)
				}
				if tc.proof != 0 {
					wantProof(t, f, tc.proof, signer.PublicKey())
				} else if f.GetCheckpoint() != nil {
					t.Errorf("a %v finding carries checkpoint %v, want none", tc.problem, f.GetCheckpoint())
				}
				var rejected []auditv1.CheckpointProblem
				for _, r := range res.GetRejectedCheckpoints() {
					rejected = append(rejected, r.GetProblem())
				}
				if len(rejected) != len(tc.rejected) || int(res.GetCheckpointsRejected()) != len(tc.rejected) {
					t.Errorf("rejected checkpoints = %v (%d in all), want %v", rejected, res.GetCheckpointsRejected(), tc.rejected)
				}
				for i := range min(len(rejected), len(tc.rejected)) {
					if rejected[i] != tc.rejected[i] {
						t.Errorf("rejected checkpoint %d = %v, want %v", i, rejected[i], tc.rejected[i])
					}
				}
				if got := boundaryEvents(e.log); got != 1 {
					t.Errorf("%d boundary.validation_failed events at audit_chain, want exactly 1", got)
				}

				// Without checkpoints the chain alone tells only some of these.
				chain, err := audit.VerifyTrail(t.Context(), sqldbtest.OpenStore(t, e.db, auditstore.Open), audit.Evidence{})
				if err != nil {
					t.Fatal(err)
				}
				if chain.GetIntact() == tc.chainOnly {
					t.Errorf("the chain alone says intact %v, want %v", chain.GetIntact(), !tc.chainOnly)
				}
			})
		})
	}
}

// restart serves a second audit service over e's database and checkpoint
// log, with no memory of what the first one signed: as after a restart.
func restart(t *testing.T, e *env, signer *auditcheckpoint.Signer) *env {
	t.Helper()
	buf := &logtest.Buffer{}
	svc := audit.New(sqldbtest.OpenStore(t, e.db, auditstore.Open), audit.Config{Signer: signer, CheckpointLog: e.checkpoints, Log: logging.New(buf, nil)})
	srv := servertest.Start(t, svc.Registration())
	c := auditv1connect.NewAuditServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(servertest.Protocols()[0].Opts)...)
	return &env{srv: srv, svc: svc, db: e.db, log: buf, c: c, checkpoints: e.checkpoints, signer: signer}
}

// The signer never vouches for a trail that no longer extends what it
// signed: after tampering it refuses, says why, and writes nothing; after a
// restart it finds its last checkpoint in the log and refuses the same.
func TestSignerRefusesATamperedTrail(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 4)
		first := signNow(t, e)
		if first.Seq != 4 || first.Hash != recs[3].GetHash() || first.Source != "audit-checkpoints.log" {
			t.Fatalf("checkpoint = %+v, want record 4 written to the log", first)
		}
		// An unchanged head is signed again (a heartbeat with a new time).
		if again := signNow(t, e); again.Seq != 4 || again.Hash != first.Hash {
			t.Fatalf("second checkpoint = %+v, want record 4 again", again)
		}
		appendRange(t, e, 5, 6)
		signNow(t, e)
		before := notes(t, e.checkpoints)

		exec := attacker(t, e)
		exec(`DELETE FROM audit_records WHERE seq = 6`)
		exec(`UPDATE audit_head SET seq = 5, hash = ? WHERE id = 1`, recs[3].GetHash())
		for _, s := range []*env{e, restart(t, e, signer)} {
			_, err := s.svc.Checkpoint(context.Background())
			if !errors.Is(err, audit.ErrCheckpointRefused) {
				t.Fatalf("Checkpoint of a cut trail: %v, want %v", err, audit.ErrCheckpointRefused)
			}
			if evs := s.log.Events("audit.checkpoint_refused"); len(evs) != 1 || evs[0]["level"] != "ERROR" || evs[0]["seq"] != float64(6) {
				t.Errorf("audit.checkpoint_refused events = %v, want one error naming record 6", evs)
			}
		}
		if got := notes(t, e.checkpoints); got != before {
			t.Errorf("a refused checkpoint changed the log:\n%s", strings.TrimPrefix(got, before))
		}
	})
}

// A restarted service continues from the last checkpoint in its log: it
// reads only the records after it, and signs their head.
func TestRestartContinuesFromTheCheckpointLog(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
		appendN(t, e, 3)
		signNow(t, e)
		r := restart(t, e, signer)
		recs := appendRange(t, r, 4, 5)
		s := signNow(t, r)
		if s.Seq != 5 || s.Hash != recs[1].GetHash() {
			t.Errorf("checkpoint after a restart = %+v, want record 5", s)
		}
		res := verify(t, r, nil)
		if !res.GetIntact() || res.GetCheckpointsChecked() != 2 || res.GetCheckpoint().GetSeq() != 5 {
			t.Errorf("verify after a restart = %v, want intact against the checkpoints at 3 and 5", res)
		}
	})
}

// The checkpoint log is shipped elsewhere because whoever cuts the trail
// may cut the local log too. A restarted service that lost both sees an
// intact trail, and the copy kept elsewhere still proves the cut.
func TestShippedCheckpointsProveWhatTheServiceLost(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 6)
		signNow(t, e)
		shipped := notes(t, e.checkpoints)

		exec := attacker(t, e)
		exec(`DELETE FROM audit_records WHERE seq > 4`)
		exec(`UPDATE audit_head SET seq = 4, hash = ? WHERE id = 1`, recs[3].GetHash())
		if err := os.Remove(e.checkpoints); err != nil {
			t.Fatal(err)
		}
		// The running service still remembers what it signed.
		res := verify(t, e, nil)
		if f := res.GetFirstBad(); f.GetProblem() != auditv1.Problem_PROBLEM_TRUNCATED || f.GetCheckpoint().GetSource() != "memory" {
			t.Errorf("verify with the log gone = %v, want truncated, proved by the service's last checkpoint", res)
		} else {
			wantProof(t, f, 6, signer.PublicKey())
		}

		r := restart(t, e, signer)
		if res := verify(t, r, nil); !res.GetIntact() {
			t.Fatalf("after a restart with the log gone verify = %v; with no checkpoint left the cut cannot show, want intact", res)
		}
		res, err := r.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: shipped})
		if err != nil {
			t.Fatal(err)
		}
		if f := res.GetFirstBad(); res.GetIntact() || f.GetSeq() != 5 || f.GetProblem() != auditv1.Problem_PROBLEM_TRUNCATED {
			t.Fatalf("verify with the shipped checkpoints = %v, want records 5 on truncated", res)
		}
		wantProof(t, res.GetFirstBad(), 6, signer.PublicKey())
		if src := res.GetFirstBad().GetCheckpoint().GetSource(); src != "request:1" {
			t.Errorf("the proof's source = %q, want request:1", src)
		}
	})
}

func TestVerifyChecksTheCheckpointsGiven(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 2)
		res, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: "not a checkpoint\n"})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetIntact() || res.GetFirstBad() != nil || res.GetCheckpointsRejected() != 1 ||
			res.GetRejectedCheckpoints()[0].GetProblem() != auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_MALFORMED ||
			res.GetRejectedCheckpoints()[0].GetSource() != "request:1" {
			t.Errorf("verify with a malformed checkpoint = %v, want not intact, the checkpoint rejected as malformed", res)
		}
		other, err := newSigner(t).Sign(2, recs[1].GetHash(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		res, err = e.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: other.Note})
		if err != nil {
			t.Fatal(err)
		}
		if res.GetIntact() || res.GetRejectedCheckpoints()[0].GetProblem() != auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_UNKNOWN_KEY {
			t.Errorf("verify with another signer's checkpoint = %v, want it rejected as unknown key", res)
		}
		own, err := signer.Sign(2, recs[1].GetHash(), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: own.Note}); err != nil || !res.GetIntact() || res.GetCheckpoint().GetSeq() != 2 {
			t.Errorf("verify with a good checkpoint = %v, %v; want intact, checked against it", res, err)
		}
		if _, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: strings.Repeat("x", 262145)}); servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("verify with 256 KiB + 1 of checkpoints: %v, want invalid_argument", err)
		}
	})
	startEach(t, audit.Config{}, func(t *testing.T, e *env) {
		_, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Checkpoints: "x\n"})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("checkpoints given to a service that signs none: %v, want failed_precondition", err)
		}
	})
}

// The loop signs at start, after appends (many appends waiting share one
// checkpoint), every interval, and once more at stop for the appends since
// the last; every checkpoint is in the log file, in order.
func TestCheckpointLoop(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer, CheckpointInterval: time.Hour}, func(t *testing.T, e *env) {
		// The hook hands each checkpoint over and then holds the signer
		// until released (or the test ends).
		signed := make(chan auditcheckpoint.Signed)
		release := make(chan struct{})
		hold, unhold := context.WithCancel(context.Background())
		audit.OnCheckpoint(e.svc, func(s auditcheckpoint.Signed) {
			select {
			case signed <- s:
			case <-hold.Done():
				return
			}
			select {
			case <-release:
			case <-hold.Done():
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.svc.RunCheckpoints(ctx) }()
		t.Cleanup(func() { cancel(); unhold(); <-done })
		next := func(what string) auditcheckpoint.Signed {
			t.Helper()
			select {
			case s := <-signed:
				return s
			case <-time.After(30 * time.Second):
				t.Fatalf("no checkpoint %s", what)
				return auditcheckpoint.Signed{}
			}
		}
		if s := next("at start"); s.Seq != 0 || s.Hash != audit.GenesisHash {
			t.Errorf("checkpoint at start = %+v, want the empty chain", s)
		}
		release <- struct{}{}
		appendN(t, e, 1)
		if s := next("after an append"); s.Seq != 1 {
			t.Errorf("checkpoint after an append = %+v, want record 1", s)
		}
		// The signer is held inside that checkpoint while five more
		// appends each ask for one: they get one checkpoint between them.
		recs := appendRange(t, e, 2, 6)
		release <- struct{}{}
		if s := next("after five appends"); s.Seq != 6 || s.Hash != recs[4].GetHash() {
			t.Errorf("checkpoint after five appends = %+v, want one of record 6", s)
		}
		release <- struct{}{}
		// At stop, the appends since the last checkpoint get one.
		// (With the loop stopped right after an append, either the append's
		// ask or the stop signs record 7, never both.)
		appendRange(t, e, 7, 7)
		cancel()
		if s := next("at stop"); s.Seq != 7 {
			t.Errorf("checkpoint at stop = %+v, want record 7", s)
		}
		release <- struct{}{}
		<-done
		valid, rejected, err := signer.Verifier().ReadFile(e.checkpoints, "log")
		if err != nil || len(rejected) != 0 {
			t.Fatalf("checkpoint log: %v, %d rejected", err, len(rejected))
		}
		var seqs []int64
		for _, v := range valid {
			seqs = append(seqs, v.Seq)
		}
		if want := []int64{0, 1, 6, 7}; !slices.Equal(seqs, want) {
			t.Errorf("checkpoints in the log = %v, want %v", seqs, want)
		}
		evs := e.log.Events("audit.checkpoint_signed")
		if len(evs) != 4 {
			t.Fatalf("%d audit.checkpoint_signed events, want 4", len(evs))
		}
		// The event carries the note, so a log shipper is a second witness.
		if _, err := signer.Verifier().Open(evs[3]["note"].(string)); err != nil {
			t.Errorf("the logged note does not verify: %v", err)
		}
	})
}

// Without appends the loop still signs every interval (a heartbeat: the
// head again, with a new time), so a checkpoint log that falls silent is a
// sign that the signer stopped or refused.
func TestCheckpointHeartbeat(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer, CheckpointInterval: 20 * time.Millisecond}, func(t *testing.T, e *env) {
		appendN(t, e, 2)
		three := make(chan struct{})
		n := 0
		audit.OnCheckpoint(e.svc, func(s auditcheckpoint.Signed) {
			if s.Seq != 2 {
				t.Errorf("heartbeat checkpoint = %+v, want record 2", s)
			}
			if n++; n == 3 {
				close(three)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); e.svc.RunCheckpoints(ctx) }()
		select {
		case <-three:
		case <-time.After(30 * time.Second):
			t.Error("fewer than three checkpoints without appends")
		}
		cancel()
		<-done
		valid, _, err := signer.Verifier().ReadFile(e.checkpoints, "log")
		if err != nil || len(valid) < 3 {
			t.Errorf("checkpoint log: %d checkpoints, %v; want at least 3", len(valid), err)
		}
	})
}

// The checkpoint log lists every signed checkpoint once, newest first, with
// its note, and the lines of the log that cannot be trusted.
func TestListCheckpoints(t *testing.T) {
	signer := newSigner(t)
	startEach(t, audit.Config{Signer: signer}, func(t *testing.T, e *env) {
		appendN(t, e, 2)
		first := signNow(t, e)
		appendRange(t, e, 3, 3)
		last := signNow(t, e)
		res, err := e.c.ListCheckpoints(asReader(), &auditv1.ListCheckpointsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got := res.GetCheckpoints()
		if len(got) != 2 || got[0].GetSeq() != last.Seq || got[1].GetSeq() != first.Seq || got[0].GetNote() != last.Note ||
			res.GetPage().GetTotal() != 2 || res.GetRejectedCount() != 0 {
			t.Fatalf("ListCheckpoints = %v, want the checkpoints at %d and %d, newest first, each once", res, last.Seq, first.Seq)
		}
		if !strings.HasPrefix(got[0].GetSource(), filepath.Base(e.checkpoints)+":") {
			t.Errorf("the newest checkpoint's source is %q, want the log file's line", got[0].GetSource())
		}
		page, err := e.c.ListCheckpoints(asReader(), &auditv1.ListCheckpointsRequest{Offset: 1, Limit: 1})
		if err != nil || len(page.GetCheckpoints()) != 1 || page.GetCheckpoints()[0].GetSeq() != first.Seq || page.GetPage().GetNextOffset() != 0 {
			t.Errorf("the second page = %v, %v; want the oldest checkpoint alone", page, err)
		}
		f, err := os.OpenFile(e.checkpoints, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString("\nnot a checkpoint\n")
		f.Close()
		if res, err := e.c.ListCheckpoints(asReader(), &auditv1.ListCheckpointsRequest{}); err != nil || res.GetRejectedCount() != 1 ||
			res.GetRejected()[0].GetProblem() != auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_MALFORMED || len(res.GetCheckpoints()) != 2 {
			t.Errorf("ListCheckpoints with a bad line = %v, %v; want it rejected as malformed beside the two", res, err)
		}
	})
	startEach(t, audit.Config{}, func(t *testing.T, e *env) {
		_, err := e.c.ListCheckpoints(asReader(), &auditv1.ListCheckpointsRequest{})
		if servertest.Code(t, err) != connect.CodeFailedPrecondition {
			t.Errorf("the checkpoint log of a service that signs none: %v, want failed_precondition", err)
		}
	})
}
