package auditstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// BenchmarkRecordOutcomes records batches of 500 outcomes, the edge's
// batch, on SQLite; the figure per op is one batch.
func BenchmarkRecordOutcomes(b *testing.B) {
	s := sqldbtest.OpenStore(b, sqldbtest.SQLite().Open(b), auditstore.Open)
	n := 0
	for b.Loop() {
		batch := make([]*auditv1.CallOutcome, 500)
		for i := range batch {
			n++
			batch[i] = outcome(fmt.Sprintf("out_%09d", n), "alice", "tasks_get", "ok", day1.Add(time.Duration(n)*time.Millisecond))
		}
		if got, err := s.RecordOutcomes(b.Context(), batch); err != nil || got != len(batch) {
			b.Fatalf("recorded %d of %d: %v", got, len(batch), err)
		}
	}
}
