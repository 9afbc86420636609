package audit

import "github.com/toolmesh/toolmesh/services/audit/checkpoint"

// OnCheckpoint makes s call fn with each checkpoint it publishes, from the
// goroutine that signed it, while it still holds the signer.
func OnCheckpoint(s *Service, fn func(checkpoint.Signed)) { s.cp.signed = fn }
