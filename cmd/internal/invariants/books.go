package invariants

import (
	"context"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// ledgerBalances: each wallet's balance row equals the sum of its ledger,
// and every wallet with a ledger has a balance row.
func ledgerBalances(ctx context.Context, in Input, t *tally) error {
	rows, err := in.Credits.Query(ctx, `SELECT w.wallet, w.balance, w.update_ms, COALESCE(SUM(l.amount), 0), COUNT(l.id)
		FROM credit_wallets w LEFT JOIN credit_ledger l ON l.wallet = w.wallet
		GROUP BY w.wallet, w.balance, w.update_ms ORDER BY w.wallet`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var wallet string
		var balance, updated, sum, entries int64
		if err := rows.Scan(&wallet, &balance, &updated, &sum, &entries); err != nil {
			return err
		}
		t.items++
		if balance != sum {
			t.broke(wallet, msTime(updated), fmt.Sprintf("credit_wallets: balance %d (updated %s)", balance, msTime(updated).UTC().Format(time.RFC3339Nano)),
				fmt.Sprintf("credit_ledger: %d entries summing to %d", entries, sum))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	orphans, err := in.Credits.Query(ctx, `SELECT wallet, COUNT(*), MAX(create_ms) FROM credit_ledger
		WHERE wallet NOT IN (SELECT wallet FROM credit_wallets) GROUP BY wallet`)
	if err != nil {
		return err
	}
	defer orphans.Close()
	for orphans.Next() {
		var wallet string
		var n, last int64
		if err := orphans.Scan(&wallet, &n, &last); err != nil {
			return err
		}
		t.items++
		t.broke(wallet, msTime(last), fmt.Sprintf("credit_ledger: %d entries for a wallet without a balance row", n))
	}
	return orphans.Err()
}

// neverNegative: walking each wallet's ledger in the order it was written,
// the running balance never goes below zero and every entry's
// balance_after is that running balance.
func neverNegative(ctx context.Context, in Input, t *tally) error {
	rows, err := in.Credits.Query(ctx, `SELECT wallet, id, amount, balance_after, reference, create_ms FROM credit_ledger ORDER BY wallet, seq`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var wallet string
	var running int64
	for rows.Next() {
		var w, id, ref string
		var amount, after, created int64
		if err := rows.Scan(&w, &id, &amount, &after, &ref, &created); err != nil {
			return err
		}
		if w != wallet {
			wallet, running = w, 0
		}
		t.items++
		running += amount
		entry := fmt.Sprintf("credit_ledger: %s %+d reference %q balance_after %d (running sum %d) at %s",
			id, amount, ref, after, running, msTime(created).UTC().Format(time.RFC3339Nano))
		switch {
		case running < 0:
			t.broke(w, msTime(created), entry, "the running balance went below zero")
		case after != running:
			t.broke(w, msTime(created), entry, "balance_after is not the running sum of the entries before it")
		}
	}
	return rows.Err()
}

// auditVerifies: the trail verifies as `toolmesh audit verify` does.
func auditVerifies(ctx context.Context, in Input, t *tally) error {
	res, err := audit.VerifyTrail(ctx, auditstore.Existing(in.Audit), in.AuditEvidence)
	if err != nil {
		return err
	}
	t.items = int(res.GetVerifiedRecords())
	if res.GetIntact() {
		return nil
	}
	records := []string{fmt.Sprintf("verified %d records, %d checkpoints checked, %d rejected",
		res.GetVerifiedRecords(), res.GetCheckpointsChecked(), res.GetCheckpointsRejected())}
	key := "trail"
	if f := res.GetFirstBad(); f != nil {
		key = fmt.Sprintf("record %d", f.GetSeq())
		records = append(records, fmt.Sprintf("first bad record %d: %s: %s", f.GetSeq(), f.GetProblem(), f.GetDetail()))
	}
	for _, r := range res.GetRejectedCheckpoints() {
		records = append(records, fmt.Sprintf("rejected checkpoint %s: %s: %s", r.GetSource(), r.GetProblem(), r.GetDetail()))
	}
	t.broke(key, time.Time{}, records...)
	return nil
}
