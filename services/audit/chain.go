package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/toolmesh/toolmesh/internal/jcs"
	"github.com/toolmesh/toolmesh/internal/protoenum"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
)

// GenesisHash is the prev_hash of the first record: the hash "before" the
// chain.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// FormatVersion is the "v" member of every record's canonical JSON. A change
// to what Canonical writes needs a new version (and verify must then know
// both).
const FormatVersion = 1

// timeLayout writes record times as RFC 3339 in UTC with exactly three
// fractional digits, so one instant has one text.
const timeLayout = "2006-01-02T15:04:05.000Z"

// Canonical returns the RFC 8785 canonical JSON of a record's content: every
// field except prev_hash and hash, which the chain hash covers separately.
// Integers travel as strings (seq may exceed 2^53, which a JSON number
// cannot hold exactly) and the time as fixed-precision RFC 3339 text:
//
//	{"actor":…,"args_digest":…,"call_id":…,"outcome":"succeeded","reason":…,
//	 "seq":"12","time":"2026-03-01T12:00:00.000Z","tool":…,"v":1}
//
// A replay (outcome "replayed") also carries "replay_of", the call id of
// the call it repeated; the other records' JSON has no such member. An
// outcome this build does not know is written as its number.
func Canonical(r *auditv1.Record) ([]byte, error) {
	c := map[string]any{
		"v":           FormatVersion,
		"seq":         strconv.FormatInt(r.GetSeq(), 10),
		"time":        r.GetTime().AsTime().UTC().Format(timeLayout),
		"actor":       r.GetActor(),
		"tool":        r.GetTool(),
		"reason":      r.GetReason(),
		"args_digest": r.GetArgsDigest(),
		"outcome":     protoenum.Word(r.GetOutcome()),
		"call_id":     r.GetCallId(),
	}
	if r.GetOutcome() == auditv1.Outcome_OUTCOME_REPLAYED || r.GetReplayOf() != "" {
		c["replay_of"] = r.GetReplayOf()
	}
	return jcs.Marshal(c)
}

// ChainHash returns the hex SHA-256 of prevHash (its 64 hex characters)
// followed by a record's canonical JSON.
func ChainHash(prevHash string, canonical []byte) string {
	h := sha256.New()
	h.Write([]byte(prevHash))
	h.Write(canonical)
	return hex.EncodeToString(h.Sum(nil))
}

// Seal sets r.Hash from r.PrevHash and r's content.
func Seal(r *auditv1.Record) error {
	c, err := Canonical(r)
	if err != nil {
		return fmt.Errorf("canonicalise record %d: %w", r.GetSeq(), err)
	}
	r.Hash = ChainHash(r.GetPrevHash(), c)
	return nil
}

// sealed reports whether r's stored hash is the hash of its content.
func sealed(r *auditv1.Record) bool {
	c, err := Canonical(r)
	return err == nil && ChainHash(r.GetPrevHash(), c) == r.GetHash()
}

// checker walks the records of a chain in sequence order and finds the first
// bad one. It keeps only the last two verified hashes and at most one record
// whose verdict waits for the next record, so any length of chain is checked
// in constant memory.
type checker struct {
	head    *auditv1.Checkpoint // nil when the head checkpoint is missing
	anchor  *auditv1.Checkpoint // nil when none was given
	witness *witness            // signed checkpoints; nil when none

	expect   int64  // the sequence number the next record must have
	prev     string // hash of the last verified record
	prevprev string // hash of the one before it ("" before the second)
	verified int64
	// pending is a record that does not link to the one before it; the next
	// record tells whether the two are swapped.
	pending *auditv1.Record
}

func newChecker(head, anchor *auditv1.Checkpoint, w *witness) *checker {
	return &checker{head: head, anchor: anchor, witness: w, expect: 1, prev: GenesisHash}
}

func bad(seq int64, p auditv1.Problem, format string, args ...any) *auditv1.Finding {
	return &auditv1.Finding{Seq: seq, Problem: p, Detail: fmt.Sprintf(format, args...)}
}

// next checks r, the record after the last one given; it returns the first
// bad record once it is known.
func (c *checker) next(r *auditv1.Record) *auditv1.Finding {
	if p := c.pending; p != nil {
		if p.GetPrevHash() == r.GetHash() {
			return bad(p.GetSeq(), auditv1.Problem_PROBLEM_OUT_OF_ORDER,
				"records %d and %d are in each other's place: record %d links to the record after it", p.GetSeq(), r.GetSeq(), p.GetSeq())
		}
		return c.brokenLink(p)
	}
	seq := r.GetSeq()
	switch {
	case seq < c.expect:
		return bad(seq, auditv1.Problem_PROBLEM_INSERTED,
			"record %d is out of sequence: the trail is numbered from 1 and record %d was expected next", seq, c.expect)
	case c.head != nil && seq > c.head.GetSeq() && c.expect > c.head.GetSeq():
		return c.beyondHead(seq)
	case seq > c.expect:
		return bad(c.expect, auditv1.Problem_PROBLEM_MISSING,
			"record %d is missing: the trail goes from record %d to record %d", c.expect, c.expect-1, seq)
	}
	if r.GetPrevHash() != c.prev {
		if c.prevprev != "" && r.GetPrevHash() == c.prevprev {
			c.verified--
			return bad(seq-1, auditv1.Problem_PROBLEM_INSERTED,
				"record %d is not part of the chain: record %d links past it to record %d", seq-1, seq, seq-2)
		}
		c.pending = r
		return nil
	}
	if !sealed(r) {
		return bad(seq, auditv1.Problem_PROBLEM_EDITED,
			"record %d was edited: its contents no longer produce its hash", seq)
	}
	if a := c.anchor; a != nil && a.GetSeq() == seq && a.GetHash() != r.GetHash() {
		return bad(seq, auditv1.Problem_PROBLEM_ANCHOR_MISMATCH,
			"record %d differs from the anchor: its hash is %s, the anchor says %s; the trail up to it was rewritten", seq, r.GetHash(), a.GetHash())
	}
	if f := c.witness.holds(seq, r.GetHash()); f != nil {
		return f
	}
	c.prevprev, c.prev = c.prev, r.GetHash()
	c.expect++
	c.verified++
	return nil
}

func (c *checker) brokenLink(r *auditv1.Record) *auditv1.Finding {
	return bad(r.GetSeq(), auditv1.Problem_PROBLEM_BROKEN_LINK,
		"record %d does not link to record %d: record %d was replaced, or records around it were removed or renumbered",
		r.GetSeq(), r.GetSeq()-1, r.GetSeq()-1)
}

func (c *checker) beyondHead(seq int64) *auditv1.Finding {
	return bad(seq, auditv1.Problem_PROBLEM_BEYOND_HEAD,
		"record %d lies past the head checkpoint (record %d): it was added outside the audit service, or the checkpoint was rolled back",
		seq, c.head.GetSeq())
}

// end checks what can only be checked once every record was seen.
func (c *checker) end() *auditv1.Finding {
	if c.pending != nil {
		return c.brokenLink(c.pending)
	}
	if f := c.witness.holds(0, GenesisHash); f != nil {
		return f
	}
	last := c.expect - 1
	if f := c.truncated(last); f != nil {
		return f
	}
	if c.head == nil {
		return bad(0, auditv1.Problem_PROBLEM_HEAD_MISSING,
			"the head checkpoint is missing, so a removed tail cannot be detected; the %d records present check out", last)
	}
	if c.head.GetHash() != c.prev {
		return bad(last, auditv1.Problem_PROBLEM_HEAD_MISMATCH,
			"the head checkpoint does not match record %d: the record or the checkpoint was replaced", last)
	}
	if a := c.anchor; a != nil {
		if a.GetSeq() > last {
			return bad(c.expect, auditv1.Problem_PROBLEM_ANCHOR_MISMATCH,
				"the anchor names record %d but the trail ends at record %d: records were removed and the head checkpoint rolled back",
				a.GetSeq(), last)
		}
		if a.GetSeq() == 0 && a.GetHash() != GenesisHash {
			return bad(0, auditv1.Problem_PROBLEM_ANCHOR_MISMATCH, "an anchor at record 0 must be the empty chain (hash of 64 zeros)")
		}
	}
	return nil
}

// truncated reports a trail that ends at record last before the head
// checkpoint or the latest signed checkpoint does.
func (c *checker) truncated(last int64) *auditv1.Finding {
	var proof *auditv1.SignedCheckpoint
	if l := c.witness.latestSigned(); l != nil && l.GetSeq() > last {
		proof = l
	}
	head := c.head != nil && c.head.GetSeq() > last
	var f *auditv1.Finding
	switch {
	case head && proof != nil && proof.GetSeq() >= c.head.GetSeq():
		f = bad(c.expect, auditv1.Problem_PROBLEM_TRUNCATED,
			"records %d to %d are gone: the trail ends at record %d but %s names record %d",
			c.expect, proof.GetSeq(), last, describe(proof), proof.GetSeq())
	case head:
		f = bad(c.expect, auditv1.Problem_PROBLEM_TRUNCATED,
			"records %d to %d are gone: the trail ends at record %d but the head checkpoint is at record %d",
			c.expect, c.head.GetSeq(), last, c.head.GetSeq())
	case proof != nil:
		f = bad(c.expect, auditv1.Problem_PROBLEM_TRUNCATED,
			"records %d to %d are gone: the trail ends at record %d but %s names record %d; the head checkpoint in the database was rewritten to hide it",
			c.expect, proof.GetSeq(), last, describe(proof), proof.GetSeq())
	default:
		return nil
	}
	f.Checkpoint = proof
	return f
}

// describe names a signed checkpoint in a finding's detail.
func describe(s *auditv1.SignedCheckpoint) string {
	return fmt.Sprintf("the checkpoint signed at %s (%s)", s.GetTime().AsTime().UTC().Format(timeLayout), s.GetSource())
}
