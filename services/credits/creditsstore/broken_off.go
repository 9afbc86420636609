//go:build !chaosbroken

package creditsstore

import creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"

// skipsLedgerInsert is false in every real build; see broken_on.go.
func skipsLedgerInsert(*creditsv1.LedgerEntry) bool { return false }
