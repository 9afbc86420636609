//go:build chaosbroken

package invariants_test

import (
	"testing"

	"github.com/toolmesh/toolmesh/cmd/internal/invariants"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
)

// TestBrokenStoreIsCaught: the chaosbroken build of the credits store skips
// the ledger row of one grant (creditsstore.BrokenReferencePrefix); the
// checker finds the wallet out of balance and names it.
func TestBrokenStoreIsCaught(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		db := e.Open(t)
		st := sqldbtest.OpenStore(t, db, creditsstore.Open)
		change(t, st, "dave", 10, "g1")
		change(t, st, "dave", 5, creditsstore.BrokenReferencePrefix+"g2")
		change(t, st, "dave", -3, "s1")
		res, out := check(t, invariants.Input{DBs: invariants.DBs{Credits: db}})
		if len(res.Violations) == 0 || res.Violations[0].Invariant != invariants.LedgerBalances || res.Violations[0].Key != "dave" {
			t.Fatalf("violations = %+v, want dave's balance out of its ledger\n%s", res.Violations, out)
		}
		t.Logf("caught:\n%s", out)
	})
}
