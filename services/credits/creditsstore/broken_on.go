//go:build chaosbroken

package creditsstore

import (
	"strings"

	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
)

// BrokenReferencePrefix marks the changes whose ledger row a chaosbroken
// build skips.
const BrokenReferencePrefix = "chaosbroken-"

// skipsLedgerInsert breaks the store on purpose, in the chaosbroken build
// only: a change whose reference starts with BrokenReferencePrefix moves
// the balance without writing its ledger row, so that the invariant
// checker's test proves the checker catches a wallet out of balance
// (cmd/internal/invariants, `go test -tags chaosbroken`).
func skipsLedgerInsert(e *creditsv1.LedgerEntry) bool {
	return strings.HasPrefix(e.GetReference(), BrokenReferencePrefix)
}
