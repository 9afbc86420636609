package reputationstore_test

import (
	"errors"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
	"github.com/toolmesh/toolmesh/services/reputation"
	"github.com/toolmesh/toolmesh/services/reputation/reputationstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the reputation store on each database
// engine.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "publish replaces the agent's attestation", Test: testPublishReplaces},
		{Name: "a keyed publish is answered once", Test: testKeyedPublish},
		{Name: "concurrent retries of one key publish once", Test: testConcurrentRetries},
	})
}

var t0 = time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)

func att(agent string, score int32, at time.Time) *reputationv1.Attestation {
	return &reputationv1.Attestation{AgentId: agent, Issuer: "https://a2a.example.com", IssuedAt: timestamppb.New(at),
		Score: &reputationv1.Score{AgentId: agent, Score: score}, Jws: agent + "-" + at.Format(time.RFC3339)}
}

func testPublishReplaces(t *testing.T, db *sqldb.DB) {
	st := sqldbtest.OpenStore(t, db, reputationstore.Open)
	ctx := t.Context()
	for _, a := range []*reputationv1.Attestation{att("alice", 10, t0), att("bob", 20, t0.Add(time.Minute)), att("alice", 30, t0.Add(2*time.Minute))} {
		if _, created, err := st.Publish(ctx, a, idempotency.Call{}); err != nil || !created {
			t.Fatalf("publish %s: created %v, %v", a.GetJws(), created, err)
		}
	}
	got, err := st.Get(ctx, "alice")
	if err != nil || got.GetScore().GetScore() != 30 {
		t.Errorf("alice's attestation = %v, %v; want the latest (score 30)", got, err)
	}
	if _, err := st.Get(ctx, "carol"); !errors.Is(err, reputation.ErrNotFound) {
		t.Errorf("carol's attestation: %v, want ErrNotFound", err)
	}
	list, total, err := st.List(ctx, 0, 10)
	if err != nil || total != 2 || len(list) != 2 || list[0].GetAgentId() != "alice" || list[1].GetAgentId() != "bob" {
		t.Errorf("list = %v (total %d), %v; want alice then bob", list, total, err)
	}
}

func testKeyedPublish(t *testing.T, db *sqldb.DB) {
	st := sqldbtest.OpenStore(t, db, reputationstore.Open)
	ctx := t.Context()
	call := idempotency.Call{Key: "k1", Digest: "sha256:one"}
	first := att("alice", 10, t0)
	if _, err := st.Replay(ctx, "alice", call); !errors.Is(err, reputation.ErrNotFound) {
		t.Errorf("replay of an unused key: %v, want ErrNotFound", err)
	}
	if _, created, err := st.Publish(ctx, first, call); err != nil || !created {
		t.Fatalf("publish: created %v, %v", created, err)
	}
	got, created, err := st.Publish(ctx, att("alice", 99, t0.Add(time.Minute)), call)
	if err != nil || created || !proto.Equal(got, first) {
		t.Errorf("retry = %v, created %v, %v; want the first attestation", got, created, err)
	}
	if got, err := st.Get(ctx, "alice"); err != nil || got.GetScore().GetScore() != 10 {
		t.Errorf("after the retry alice's attestation = %v, %v; want the first", got, err)
	}
	if got, err := st.Replay(ctx, "alice", call); err != nil || !proto.Equal(got, first) {
		t.Errorf("replay = %v, %v; want the first attestation", got, err)
	}
	if _, err := st.Replay(ctx, "alice", idempotency.Call{Key: "k1", Digest: "sha256:two"}); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Errorf("replay for another request: %v, want ErrKeyReused", err)
	}
	if _, _, err := st.Publish(ctx, att("alice", 5, t0), idempotency.Call{Key: "k1", Digest: "sha256:two"}); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Errorf("publish for another request: %v, want ErrKeyReused", err)
	}
	// Keys belong to their agent.
	if _, created, err := st.Publish(ctx, att("bob", 1, t0), call); err != nil || !created {
		t.Errorf("bob's publish with alice's key: created %v, %v; want a publish of its own", created, err)
	}
}

func testConcurrentRetries(t *testing.T, db *sqldb.DB) {
	st := sqldbtest.OpenStore(t, db, reputationstore.Open)
	call := idempotency.Call{Key: "race", Digest: "sha256:same"}
	const n = 8
	var wg sync.WaitGroup
	created := make(chan bool, n)
	results := make(chan string, n)
	for i := range n {
		wg.Go(func() {
			got, c, err := st.Publish(t.Context(), att("alice", int32(i), t0.Add(time.Duration(i)*time.Second)), call)
			if err != nil {
				t.Errorf("publish %d: %v", i, err)
				return
			}
			created <- c
			results <- got.GetJws()
		})
	}
	wg.Wait()
	close(created)
	close(results)
	firsts, jws := 0, map[string]bool{}
	for c := range created {
		if c {
			firsts++
		}
	}
	for j := range results {
		jws[j] = true
	}
	if firsts != 1 || len(jws) != 1 {
		t.Errorf("%d publishes created, answering %d attestations; want 1 and 1", firsts, len(jws))
	}
}
