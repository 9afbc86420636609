package audittrail

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"testing"

	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
)

// batchCounter is an audit service that records the size of each batch and,
// while the first few are being sent, lets more calls end (during(i) runs
// inside the i-th RecordOutcomes).
type batchCounter struct {
	auditv1connect.AuditServiceClient
	sizes  []int
	during func(i int)
}

func (b *batchCounter) RecordOutcomes(_ context.Context, req *auditv1.RecordOutcomesRequest) (*auditv1.RecordOutcomesResponse, error) {
	b.sizes = append(b.sizes, len(req.GetOutcomes()))
	if b.during != nil {
		b.during(len(b.sizes))
	}
	return &auditv1.RecordOutcomesResponse{}, nil
}

// TestOutcomesArrivingDuringASendWaitForTheNextFlush: under a steady stream
// of calls, outcomes that end while a batch is on its way are not sent in a
// batch of their own right after it (each batch is a commit in the audit
// service), but with the next full batch, the next tick or Close.
func TestOutcomesArrivingDuringASendWaitForTheNextFlush(t *testing.T) {
	ctx := context.Background()
	audit := &batchCounter{}
	l := newOutcomeLog(audit, slog.New(slog.NewTextHandler(io.Discard, nil)))
	add := func(n int) {
		for range n {
			l.Add(Outcome{Agent: "a", Subject: "s", Tool: "memory_save", Code: "ok"})
		}
	}
	audit.during = func(i int) {
		if i <= 3 { // bounded, so that a log that keeps sending still ends
			add(5)
		}
	}

	add(OutcomeBatch + 10)
	l.flush(ctx, 0) // woken by a full batch
	if want := []int{OutcomeBatch}; !slices.Equal(audit.sizes, want) {
		t.Fatalf("after a full batch was queued, batches sent %v, want %v: the 15 outcomes left over wait for the next tick", audit.sizes, want)
	}

	l.flush(ctx, l.queued()) // the tick
	if want := []int{OutcomeBatch, 15}; !slices.Equal(audit.sizes, want) {
		t.Fatalf("after the tick, batches sent %v, want %v: what was queued at the tick, and not the 5 that ended while it was sent", audit.sizes, want)
	}

	add(2*OutcomeBatch + 1)
	l.flush(ctx, l.queued()) // a tick with 1,006 queued (and 5 more while the first batch is sent)
	if want := []int{OutcomeBatch, 15, OutcomeBatch, OutcomeBatch, 11}; !slices.Equal(audit.sizes, want) {
		t.Fatalf("after a tick with 1,006 queued, batches sent %v, want %v", audit.sizes, want)
	}

	add(3)
	l.flush(ctx, 0)           // a wake with less than a batch queued sends nothing
	l.flush(ctx, math.MaxInt) // as Close does
	if want := []int{OutcomeBatch, 15, OutcomeBatch, OutcomeBatch, 11, 3}; !slices.Equal(audit.sizes, want) {
		t.Fatalf("at Close, batches sent %v, want %v: Close sends what is left", audit.sizes, want)
	}
}
