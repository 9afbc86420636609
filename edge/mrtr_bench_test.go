package edge_test

import (
	"slices"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// BenchmarkElicitationRounds measures the rounds of elicited calls as a
// 2026-07-28 client sees them over HTTP, against a real Temporal dev server
// with an in-process calls worker (docs/performance.md: a middle round ≤ 15 ms p50 /
// 40 ms p99, a final round with its side effect ≤ 30 ms p50). Each of b.N
// calls of testing_purge takes three rounds, measured phase by phase (all
// starts, then all middle rounds, then all final rounds):
//
//   - start: round 1, update-with-start returning the first question;
//   - middle: an update returning the next question (no activity);
//   - final: an update whose handler runs the side effect in an activity.
//
// Run it over 200 calls with
//
//	go test -run '^$' -bench ElicitationRounds -benchtime 200x ./edge
//
// Figures are reported, never asserted.
func BenchmarkElicitationRounds(b *testing.B) {
	m := edgetest.NewMRTRMesh(b)
	m.StartWorker(b)
	f := m.Edge(b, nil)
	a := edgetest.NewAnswerer(edgetest.PurgeSheet)
	answers := func(res edgetest.RawResult) map[string]any {
		out := map[string]any{}
		for key, ir := range res.InputRequests {
			var schema any = ir.Params.RequestedSchema
			_, content := a.Answer(ir.Params.Message, schema)
			out[key] = map[string]any{"action": "accept", "content": content}
		}
		return out
	}
	args := map[string]any{}
	// Warm up connections, the worker's caches and the dev server.
	for i := range 5 {
		r1 := edgetest.RawRound(b, f.URL, "testing_purge", i, args, "", nil, nil)
		r2 := edgetest.RawRound(b, f.URL, "testing_purge", i, args, r1.RequestState, answers(r1), nil)
		edgetest.RawRound(b, f.URL, "testing_purge", i, args, r2.RequestState, answers(r2), nil)
	}

	// Phase by phase: every call is started, then every call gets its
	// middle round, then its final round — a round finds its call waiting
	// for the answer, as it would after the user took a moment, rather than
	// still settling from the round before.
	start := make([]time.Duration, b.N)
	middle := make([]time.Duration, b.N)
	final := make([]time.Duration, b.N)
	states := make([]edgetest.RawResult, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		states[i] = edgetest.RawRound(b, f.URL, "testing_purge", 1, args, "", nil, nil)
		start[i] = time.Since(t0)
	}
	for i := range b.N {
		in := answers(states[i])
		t0 := time.Now()
		states[i] = edgetest.RawRound(b, f.URL, "testing_purge", 2, args, states[i].RequestState, in, nil)
		middle[i] = time.Since(t0)
		if states[i].ResultType != "input_required" {
			b.Fatalf("middle round = %+v", states[i])
		}
	}
	for i := range b.N {
		in := answers(states[i])
		t0 := time.Now()
		r := edgetest.RawRound(b, f.URL, "testing_purge", 3, args, states[i].RequestState, in, nil)
		final[i] = time.Since(t0)
		if r.ResultType != "complete" || r.IsError {
			b.Fatalf("final round = %s", r.StructuredContent)
		}
	}
	b.StopTimer()
	for _, s := range []struct {
		name string
		lat  []time.Duration
	}{{"start", start}, {"middle", middle}, {"final", final}} {
		slices.Sort(s.lat)
		b.ReportMetric(ms(s.lat[len(s.lat)/2]), s.name+"-p50-ms")
		b.ReportMetric(ms(s.lat[(len(s.lat)-1)*99/100]), s.name+"-p99-ms")
	}
	if n := m.Backend.Executions("Purge"); n != b.N+5 {
		b.Errorf("Purge ran %d times for %d calls", n, b.N+5)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
