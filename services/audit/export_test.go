package audit

import "github.com/toolmesh/toolmesh/internal/auditcheckpoint"

// OnCheckpoint makes s call fn with each checkpoint it publishes, from the
// goroutine that signed it, while it still holds the signer.
func OnCheckpoint(s *Service, fn func(auditcheckpoint.Signed)) { s.cp.signed = fn }
