package agentsstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/services/agents"
	"github.com/toolmesh/toolmesh/services/agents/agentsstore"
)

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// TestStore checks the behaviour of the agents store on SQLite and on
// PostgreSQL.
func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "create and get", Test: testCreateGet},
		{Name: "reopen keeps agents", Test: testReopen},
		{Name: "ids are unique", Test: testUniqueID},
		{Name: "idempotency key", Test: testIdempotency},
		{Name: "concurrent registrations of one id", Test: testConcurrentCreate},
		{Name: "concurrent retries of one registration", Test: testConcurrentRetry},
		{Name: "stress: racing registrations with one key", Test: testStressCreate},
		{Name: "list in id order", Test: testList},
		{Name: "summary counts per status", Test: testSummary},
		{Name: "update compare-and-swap", Test: testUpdate},
		{Name: "concurrent updates", Test: testConcurrentUpdate},
	})
}

const (
	owner = "owner"
	noKey = ""
)

var (
	active  = agentsv1.AgentStatus_AGENT_STATUS_ACTIVE
	paused  = agentsv1.AgentStatus_AGENT_STATUS_PAUSED
	retired = agentsv1.AgentStatus_AGENT_STATUS_RETIRED
	anyOf   = agentsv1.AgentStatus_AGENT_STATUS_UNSPECIFIED
)

// day1 is an arbitrary UTC day.
var day1 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func openStore(t *testing.T, db *sqldb.DB) *agentsstore.Store {
	return sqldbtest.OpenStore(t, db, agentsstore.Open)
}

// newAgent is an active agent as the service builds it: times have
// millisecond precision.
func newAgent(id string, at time.Time) *agentsv1.Agent {
	at = at.Truncate(time.Millisecond)
	return &agentsv1.Agent{
		Id:           id,
		DisplayName:  "Agent " + id,
		Description:  "registered at " + at.Format(time.RFC3339Nano),
		Status:       active,
		RegisteredBy: owner,
		CreateTime:   timestamppb.New(at),
		UpdateTime:   timestamppb.New(at),
	}
}

// createAgent is Store.Create of a as a call with key, with the request
// digest the service makes; it checks that created says whether the answer
// is a.
func createAgent(ctx context.Context, s *agentsstore.Store, a *agentsv1.Agent, key string) (*agentsv1.Agent, error) {
	req := &agentsv1.RegisterRequest{AgentId: a.GetId(), DisplayName: a.GetDisplayName(), Description: a.GetDescription()}
	got, created, err := s.Create(ctx, a, idempotency.Call{Key: key, Digest: idempotency.Digest(req)})
	if err == nil && created != proto.Equal(got, a) {
		return nil, fmt.Errorf("Create says created %v, but answered %v for %v", created, got, a)
	}
	return got, err
}

func create(t *testing.T, s *agentsstore.Store, a *agentsv1.Agent, key string) *agentsv1.Agent {
	t.Helper()
	got, err := createAgent(t.Context(), s, a, key)
	if err != nil {
		t.Fatalf("Create(%s, key %q): %v", a.GetId(), key, err)
	}
	return got
}

func get(t *testing.T, s *agentsstore.Store, id string) *agentsv1.Agent {
	t.Helper()
	got, err := s.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return got
}

func withStatus(t *testing.T, s *agentsstore.Store, a *agentsv1.Agent, to agentsv1.AgentStatus, at time.Time) *agentsv1.Agent {
	t.Helper()
	next := proto.Clone(a).(*agentsv1.Agent)
	next.Status = to
	next.StatusReason = "now " + to.String()
	next.UpdateTime = timestamppb.New(at)
	got, err := s.Update(t.Context(), next, a.GetStatus())
	if err != nil {
		t.Fatalf("Update(%s, %v → %v): %v", a.GetId(), a.GetStatus(), to, err)
	}
	return got
}

func testCreateGet(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	a := newAgent("research-bot_2", day1.Add(9*time.Hour+123*time.Millisecond))
	a.DisplayName = "Résumé prüfer ✓"
	a.Description = "reads 'quotes' and \"double quotes\"; 100% sure"
	prototest.Equal(t, "Create returned", create(t, s, proto.Clone(a).(*agentsv1.Agent), noKey), a)
	prototest.Equal(t, "Get returned", get(t, s, a.GetId()), a)

	_, err := s.Get(t.Context(), "research-bot")
	sqldbtest.WantErr(t, "Get of an unknown id", err, agents.ErrNotFound)
	_, err = s.Get(t.Context(), "RESEARCH-BOT_2")
	sqldbtest.WantErr(t, "Get with the id in another case", err, agents.ErrNotFound)
}

func testReopen(t *testing.T, db *sqldb.DB) {
	a := newAgent("keeper", day1)
	create(t, openStore(t, db), a, noKey)
	s := openStore(t, db) // migrations run again: a no-op
	prototest.Equal(t, "Get after reopening", get(t, s, a.GetId()), a)
}

func testUniqueID(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	first := create(t, s, newAgent("scout", day1), noKey)

	again := newAgent("scout", day1.Add(time.Hour))
	again.DisplayName = "Another scout"
	again.RegisteredBy = "someone-else"
	_, err := createAgent(t.Context(), s, again, noKey)
	sqldbtest.WantErr(t, "Create of a taken id", err, agents.ErrExists)
	// A registration retried under a key it was never stored with is no retry.
	_, err = createAgent(t.Context(), s, newAgent("scout", day1.Add(time.Hour)), "new-key")
	sqldbtest.WantErr(t, "Create of a taken id with a key", err, agents.ErrExists)
	prototest.Equal(t, "the agent after refused creates", get(t, s, "scout"), first)

	// The refused statements leave the store usable (a PostgreSQL
	// transaction that failed would not be).
	create(t, s, newAgent("scout-2", day1), noKey)
	if _, total, err := s.List(t.Context(), anyOf, 0, 50); err != nil || total != 2 {
		t.Errorf("List after refused creates: total %d, %v; want 2", total, err)
	}
}

func testIdempotency(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	first := create(t, s, newAgent("scout", day1), "key-1")

	// The same key with another request is refused.
	other := newAgent("scout", day1.Add(time.Second))
	other.Description = first.GetDescription()
	other.DisplayName = "a different name"
	got, err := createAgent(ctx, s, other, "key-1")
	sqldbtest.WantErr(t, "the same key with another name", err, idempotency.ErrKeyReused)
	prototest.Equal(t, "the agent holding the reused key", got, first)
	_, err = createAgent(ctx, s, newAgent("scout-3", day1), "key-1")
	sqldbtest.WantErr(t, "the same key for another id", err, idempotency.ErrKeyReused)

	// The same key with the same request is a retry.
	retry := func(at time.Time) *agentsv1.Agent {
		a := newAgent("scout", at)
		a.Description = first.GetDescription()
		return a
	}
	prototest.Equal(t, "a retry with the same key", create(t, s, retry(day1.Add(time.Second)), "key-1"), first)

	// The retry answers with the agent as it is now.
	now := withStatus(t, s, first, paused, day1.Add(time.Minute))
	prototest.Equal(t, "a retry after a status change", create(t, s, retry(day1.Add(2*time.Minute)), "key-1"), now)

	// The key is the registrar's own: the same key from someone else is
	// another call, here for an id that is taken.
	theirs := retry(day1.Add(time.Second))
	theirs.RegisteredBy = "another-owner"
	_, err = createAgent(ctx, s, theirs, "key-1")
	sqldbtest.WantErr(t, "the same key and id from another registrar", err, agents.ErrExists)
	_, err = createAgent(ctx, s, retry(day1.Add(time.Second)), noKey)
	sqldbtest.WantErr(t, "the same id without a key", err, agents.ErrExists)
	theirs = newAgent("scout-2", day1.Add(time.Second))
	theirs.RegisteredBy = "another-owner"
	prototest.Equal(t, "another registrar's key-1 for another id", create(t, s, theirs, "key-1"), theirs)

	if _, total, err := s.List(ctx, anyOf, 0, 50); err != nil || total != 2 {
		t.Errorf("stored %d agents (%v), want 2", total, err)
	}
}

// createConcurrently runs n creates of agent id at once, each with the key
// key(i) and the display name name(i), and returns their results.
func createConcurrently(t *testing.T, db *sqldb.DB, s *agentsstore.Store, n int, id string, key, name func(i int) string) ([]*agentsv1.Agent, []error) {
	t.Helper()
	got, errs := make([]*agentsv1.Agent, n), make([]error, n)
	sqldbtest.Race(t, db, n, func(i int) {
		a := newAgent(id, day1.Add(time.Duration(i)*time.Millisecond))
		a.DisplayName = name(i)
		a.Description = "one of the racers"
		got[i], errs[i] = createAgent(t.Context(), s, a, key(i))
	})
	return got, errs
}

func testConcurrentCreate(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	got, errs := createConcurrently(t, db, s, 16, "contested", func(int) string { return noKey }, func(i int) string { return fmt.Sprintf("racer %d", i) })
	var winner *agentsv1.Agent
	for i, err := range errs {
		switch {
		case err == nil && winner == nil:
			winner = got[i]
		case err == nil:
			t.Errorf("both %q and %q registered agent contested", winner.GetDisplayName(), got[i].GetDisplayName())
		case !errors.Is(err, agents.ErrExists):
			t.Errorf("create %d: %v, want success or ErrExists", i, err)
		}
	}
	if winner == nil {
		t.Fatal("no create stored the agent")
	}
	prototest.Equal(t, "stored agent", get(t, s, "contested"), winner)
}

// A registration retried while the first attempt is still in flight gets
// the agent, not a conflict.
func testConcurrentRetry(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	got, errs := createConcurrently(t, db, s, 16, "retried", func(int) string { return "same-key" }, func(int) string { return "the racer" })
	stored := get(t, s, "retried")
	for i, err := range errs {
		if err != nil {
			t.Errorf("create %d: %v, want the stored agent", i, err)
			continue
		}
		prototest.Equal(t, fmt.Sprintf("create %d returned", i), got[i], stored)
	}
	if _, total, err := s.List(t.Context(), anyOf, 0, 50); err != nil || total != 1 {
		t.Errorf("stored %d agents (%v), want 1", total, err)
	}
}

func testList(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	if got, total, err := s.List(ctx, anyOf, 0, 50); err != nil || len(got) != 0 || total != 0 {
		t.Errorf("List of an empty directory = %v, total %d, %v; want nothing", prototest.IDs(got), total, err)
	}
	// Ids whose byte order differs from a dictionary's, which ignores
	// punctuation and would put "agent-b" after "agenta" and "agent_c"
	// between them. Created out of order; b and d paused, e retired.
	want := []string{"agent-b", "agent-d", "agent1", "agent_c", "agenta", "agente"}
	byID := map[string]*agentsv1.Agent{}
	for i, j := range []int{4, 0, 5, 2, 1, 3} {
		id := want[j]
		byID[id] = create(t, s, newAgent(id, day1.Add(time.Duration(i)*time.Minute)), noKey)
	}
	byID["agent-b"] = withStatus(t, s, byID["agent-b"], paused, day1.Add(time.Hour))
	byID["agent-d"] = withStatus(t, s, byID["agent-d"], paused, day1.Add(time.Hour))
	byID["agente"] = withStatus(t, s, byID["agente"], retired, day1.Add(time.Hour))
	agentsOf := func(ids ...string) []*agentsv1.Agent {
		out := make([]*agentsv1.Agent, 0, len(ids))
		for _, id := range ids {
			out = append(out, byID[id])
		}
		return out
	}

	for _, tc := range []struct {
		status        agentsv1.AgentStatus
		offset, limit int
		want          []*agentsv1.Agent
		total         int
	}{
		{anyOf, 0, 50, agentsOf(want...), 6},
		{anyOf, 0, 2, agentsOf("agent-b", "agent-d"), 6},
		{anyOf, 2, 2, agentsOf("agent1", "agent_c"), 6},
		{anyOf, 4, 2, agentsOf("agenta", "agente"), 6},
		{anyOf, 5, 2, agentsOf("agente"), 6},
		{anyOf, 6, 2, agentsOf(), 6},
		{active, 0, 50, agentsOf("agent1", "agent_c", "agenta"), 3},
		{active, 1, 1, agentsOf("agent_c"), 3},
		{paused, 0, 50, agentsOf("agent-b", "agent-d"), 2},
		{retired, 0, 50, agentsOf("agente"), 1},
	} {
		what := fmt.Sprintf("List(%v, offset %d, limit %d)", tc.status, tc.offset, tc.limit)
		got, total, err := s.List(ctx, tc.status, tc.offset, tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if diff := cmp.Diff(prototest.IDs(tc.want), prototest.IDs(got)); diff != "" {
			t.Errorf("%s: ids (-want +got):\n%s", what, diff)
		} else if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: agents (-want +got):\n%s", what, diff)
		}
		if total != tc.total {
			t.Errorf("%s: total = %d, want %d", what, total, tc.total)
		}
	}

}

func testSummary(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	sum, err := s.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&agentsv1.StatusSummary{}, sum, protocmp.Transform()); diff != "" {
		t.Errorf("Summary of an empty directory (-want +got):\n%s", diff)
	}

	var all []*agentsv1.Agent
	for i := range 7 {
		all = append(all, create(t, s, newAgent(fmt.Sprintf("agent-%d", i), day1), noKey))
	}
	withStatus(t, s, all[0], paused, day1.Add(time.Hour))
	withStatus(t, s, all[1], paused, day1.Add(time.Hour))
	withStatus(t, s, withStatus(t, s, all[2], paused, day1.Add(time.Hour)), retired, day1.Add(2*time.Hour))
	sum, err = s.Summary(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := &agentsv1.StatusSummary{Total: 7, Active: 4, Paused: 2, Retired: 1}
	if diff := cmp.Diff(want, sum, protocmp.Transform()); diff != "" {
		t.Errorf("Summary (-want +got):\n%s", diff)
	}
}

func testUpdate(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	a := create(t, s, newAgent("worker", day1), noKey)

	want := proto.Clone(a).(*agentsv1.Agent)
	want.Status = paused
	want.StatusReason = "maintenance window"
	want.UpdateTime = timestamppb.New(day1.Add(time.Minute))
	// Update writes status, reason and update time, nothing else.
	next := proto.Clone(want).(*agentsv1.Agent)
	next.DisplayName = "renamed"
	next.RegisteredBy = "mallory"
	next.CreateTime = timestamppb.New(day1.Add(time.Hour))
	got, err := s.Update(ctx, next, active)
	if err != nil {
		t.Fatal(err)
	}
	prototest.Equal(t, "Update active → paused returned", got, want)

	// A writer that still believes the agent is active loses.
	stale := proto.Clone(a).(*agentsv1.Agent)
	stale.Status = retired
	_, err = s.Update(ctx, stale, active)
	sqldbtest.WantErr(t, "Update from a stale status", err, agents.ErrStale)

	unknown := newAgent("nobody", day1)
	unknown.Status = paused
	_, err = s.Update(ctx, unknown, active)
	sqldbtest.WantErr(t, "Update of an unknown id", err, agents.ErrNotFound)

	prototest.Equal(t, "stored agent", get(t, s, "worker"), want)
}

func testConcurrentUpdate(t *testing.T, db *sqldb.DB) {
	ctx := t.Context()
	s := openStore(t, db)
	a := create(t, s, newAgent("worker", day1), noKey)
	const writers = 10
	results, errs := make([]*agentsv1.Agent, writers), make([]error, writers)
	sqldbtest.Race(t, db, writers, func(i int) {
		next := proto.Clone(a).(*agentsv1.Agent)
		next.Status = []agentsv1.AgentStatus{paused, retired}[i%2]
		next.StatusReason = fmt.Sprintf("writer %d", i)
		results[i], errs[i] = s.Update(ctx, next, active)
	})
	winner := sqldbtest.OneWinner(t, errs, agents.ErrStale)
	prototest.Equal(t, "stored agent", get(t, s, "worker"), results[winner])
}

func testStressCreate(t *testing.T, db *sqldb.DB) {
	s := openStore(t, db)
	stored := sqldbtest.Stress(t, db, func(round, racer, variant int) sqldbtest.Outcome {
		// The other request registers another id under the same key.
		a := newAgent(fmt.Sprintf("agent-%d-%d", round, variant), day1.Add(time.Duration(racer)*time.Millisecond))
		a.Description = "one of the racers"
		got, err := createAgent(t.Context(), s, a, fmt.Sprintf("key-%d", round))
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			return sqldbtest.Outcome{Reused: true}
		case err != nil:
			return sqldbtest.Outcome{Err: err}
		}
		return sqldbtest.Outcome{ID: got.GetId(), Created: got.GetCreateTime().AsTime().Equal(a.GetCreateTime().AsTime())}
	})
	list, total, err := s.List(t.Context(), anyOf, 0, 200)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(stored, prototest.IDs(list), cmpopts.SortSlices(func(a, b string) bool { return a < b })); diff != "" || total != len(stored) {
		t.Errorf("stored agents are not the ones answered (-answered +stored):\n%s", diff)
	}
}
