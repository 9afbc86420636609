package audit

import (
	"context"
	"fmt"
	"iter"
	"sort"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Evidence is what a verify checks the chain against besides the chain
// itself and its head row.
type Evidence struct {
	// Anchor is a head kept from an earlier verify; nil when none.
	Anchor *auditv1.Checkpoint
	// Checkpoints are signed checkpoints whose signatures verified, from
	// every source (the checkpoint log, copies of it, the caller).
	Checkpoints []auditcheckpoint.Signed
	// Rejected are checkpoints that were read but cannot be trusted.
	Rejected []auditcheckpoint.Rejected
}

// maxRejectedShown bounds the rejected checkpoints a verify lists.
const maxRejectedShown = 20

// VerifyTrail walks the whole chain in store and checks it: every record's
// hash and link, the head row, the anchor, and every signed checkpoint of
// ev. It is what AuditService.Verify answers and what `toolmesh audit
// verify` runs offline against a database and checkpoint files.
func VerifyTrail(ctx context.Context, store Store, ev Evidence) (*auditv1.VerifyResponse, error) {
	w := newWitness(ev.Checkpoints)
	res := &auditv1.VerifyResponse{Checkpoint: w.latestSigned(), CheckpointsChecked: int64(w.count)}
	err := store.Walk(ctx, 0, func(head *auditv1.Checkpoint, records iter.Seq2[*auditv1.Record, error]) error {
		res.Head = head
		c := newChecker(head, ev.Anchor, w)
		for r, err := range records {
			if err != nil {
				return err
			}
			if res.FirstBad = c.next(r); res.FirstBad != nil {
				break
			}
		}
		if res.FirstBad == nil {
			res.FirstBad = c.end()
		}
		res.VerifiedRecords = c.verified
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit trail: %w", err)
	}
	res.CheckpointsRejected = int64(len(ev.Rejected))
	for _, r := range ev.Rejected[:min(len(ev.Rejected), maxRejectedShown)] {
		res.RejectedCheckpoints = append(res.RejectedCheckpoints, &auditv1.RejectedCheckpoint{
			Source: r.Source, Problem: checkpointProblem(r.Problem), Detail: r.Detail, Note: r.Note,
		})
	}
	res.Intact = res.FirstBad == nil && len(ev.Rejected) == 0
	return res, nil
}

func checkpointProblem(p auditcheckpoint.Problem) auditv1.CheckpointProblem {
	switch p {
	case auditcheckpoint.Malformed:
		return auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_MALFORMED
	case auditcheckpoint.UnknownKey:
		return auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_UNKNOWN_KEY
	case auditcheckpoint.BadSignature:
		return auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_BAD_SIGNATURE
	}
	return auditv1.CheckpointProblem_CHECKPOINT_PROBLEM_UNSPECIFIED
}

// SignedProto is a signed checkpoint as the API shows it.
func SignedProto(s auditcheckpoint.Signed) *auditv1.SignedCheckpoint {
	return &auditv1.SignedCheckpoint{
		Origin: s.Origin, Seq: s.Seq, Hash: s.Hash, Time: timestamppb.New(s.Time), Source: s.Source, Note: s.Note,
	}
}

// witness is the signed checkpoints a chain is checked against: for each
// sequence number, each distinct hash signed for it (the latest signing
// kept). A nil witness holds nothing.
type witness struct {
	bySeq  map[int64][]*auditv1.SignedCheckpoint
	latest *auditv1.SignedCheckpoint
	count  int
}

func newWitness(signed []auditcheckpoint.Signed) *witness {
	w := &witness{bySeq: map[int64][]*auditv1.SignedCheckpoint{}}
	for _, s := range signed {
		list := w.bySeq[s.Seq]
		i := sort.Search(len(list), func(i int) bool { return list[i].GetHash() >= s.Hash })
		switch {
		case i < len(list) && list[i].GetHash() == s.Hash:
			if s.Time.After(list[i].GetTime().AsTime()) {
				list[i] = SignedProto(s)
			}
		default:
			list = append(list, nil)
			copy(list[i+1:], list[i:])
			list[i] = SignedProto(s)
			w.count++
		}
		w.bySeq[s.Seq] = list
		if l := w.latest; l == nil || s.Seq > l.GetSeq() || (s.Seq == l.GetSeq() && s.Time.After(l.GetTime().AsTime())) {
			w.latest = list[i]
		}
	}
	return w
}

// holds reports a signed checkpoint at seq that names another hash.
func (w *witness) holds(seq int64, hash string) *auditv1.Finding {
	if w == nil {
		return nil
	}
	for _, s := range w.bySeq[seq] {
		if s.GetHash() != hash {
			f := bad(seq, auditv1.Problem_PROBLEM_FORKED,
				"record %d has hash %s but %s says %s: the trail up to record %d was rewritten, its hashes recomputed",
				seq, hash, describe(s), s.GetHash(), seq)
			f.Checkpoint = s
			return f
		}
	}
	return nil
}

// latestSigned is the signed checkpoint with the highest sequence number
// (the latest signed among those), nil when there is none.
func (w *witness) latestSigned() *auditv1.SignedCheckpoint {
	if w == nil {
		return nil
	}
	return w.latest
}
