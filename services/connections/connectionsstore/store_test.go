package connectionsstore_test

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/services/connections"
	"github.com/toolmesh/toolmesh/services/connections/connectionsstore"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

func TestStore(t *testing.T) {
	sqldbtest.Run(t, &pg, []sqldbtest.Test{
		{Name: "put, get, list, relink", Test: testPutGetList},
		{Name: "status moves only from the states named; revoking erases the tokens", Test: testStatus},
		{Name: "one of many racing claimers takes the refresh lease", Test: testClaimRace},
		{Name: "a refresh lands only on the generation it started from", Test: testGenerations},
		{Name: "a link for a call that ended stores nothing; a linked call cannot end", Test: testLinkCalls},
	})
}

var (
	t0     = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	github = connectionsv1.Provider_PROVIDER_GITHUB
	active = connectionsv1.Status_STATUS_ACTIVE
)

func put(t *testing.T, st *connectionsstore.Store, agent, account string, at time.Time) connections.Record {
	t.Helper()
	r := connections.Record{
		Conn: &connectionsv1.Connection{Id: ids.NewAt("con", at), Agent: agent, Provider: github, Account: account, Scopes: []string{"repo"},
			Status: active, CreateTime: timestamppb.New(at), UpdateTime: timestamppb.New(at), ExpireTime: timestamppb.New(at.Add(time.Hour))},
		Tokens: connections.Sealed{KEK: "k1", Access: []byte("sealed-access-" + account), Refresh: []byte("sealed-refresh-" + account)},
	}
	if err := st.Put(t.Context(), r, connections.LinkCall{}); err != nil {
		t.Fatal(err)
	}
	return r
}

func open(t *testing.T, db *sqldb.DB) *connectionsstore.Store {
	return sqldbtest.OpenStore(t, db, connectionsstore.Open)
}

func testPutGetList(t *testing.T, db *sqldb.DB) {
	st, ctx := open(t, db), t.Context()
	a := put(t, st, "agent-a", "octo-a", t0)
	put(t, st, "agent-b", "octo-b", t0.Add(time.Second))
	got, err := st.Get(ctx, "agent-a", github)
	if err != nil || got.Conn.GetId() != a.Conn.GetId() || string(got.Tokens.Access) != "sealed-access-octo-a" || got.Conn.GetScopes()[0] != "repo" ||
		!got.Conn.GetExpireTime().AsTime().Equal(t0.Add(time.Hour)) || got.Conn.GetUseTime() != nil {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	_, err = st.Get(ctx, "agent-c", github)
	sqldbtest.WantErr(t, "Get of an agent never linked", err, connections.ErrNotFound)

	list, total, err := st.List(ctx, "", connectionsv1.Provider_PROVIDER_UNSPECIFIED, 0, 10)
	if err != nil || total != 2 || list[0].GetAgent() != "agent-b" {
		t.Fatalf("List all = %v (%d), %v; want both, newest first", list, total, err)
	}
	if list, total, _ := st.List(ctx, "agent-a", github, 0, 10); total != 1 || list[0].GetAccount() != "octo-a" {
		t.Errorf("List of agent-a = %v", list)
	}

	// A new link replaces the agent's connection: a new id, tokens and
	// generation.
	relinked := put(t, st, "agent-a", "octo-a2", t0.Add(2*time.Second))
	got, _ = st.Get(ctx, "agent-a", github)
	if got.Conn.GetId() != relinked.Conn.GetId() || got.Conn.GetAccount() != "octo-a2" || got.Generation == a.Generation {
		t.Errorf("after relinking Get = %v gen %d", got.Conn, got.Generation)
	}
	_, err = st.ByID(ctx, a.Conn.GetId())
	sqldbtest.WantErr(t, "ByID of the replaced connection", err, connections.ErrNotFound)
	if err := st.Touch(ctx, got.Conn.GetId(), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, _ = st.ByID(ctx, got.Conn.GetId()); !got.Conn.GetUseTime().AsTime().Equal(t0.Add(time.Minute)) {
		t.Errorf("use time after Touch = %v", got.Conn.GetUseTime())
	}
}

func testStatus(t *testing.T, db *sqldb.DB) {
	st, ctx := open(t, db), t.Context()
	a := put(t, st, "agent-a", "octo-a", t0)
	id := a.Conn.GetId()
	fromActive := []connectionsv1.Status{active}
	r, changed, err := st.SetStatus(ctx, id, connectionsv1.Status_STATUS_BROKEN, fromActive, t0.Add(time.Minute))
	if err != nil || !changed || r.Conn.GetStatus() != connectionsv1.Status_STATUS_BROKEN || len(r.Tokens.Access) == 0 {
		t.Fatalf("break = %v %v, %v", r.Conn, changed, err)
	}
	if _, changed, _ := st.SetStatus(ctx, id, connectionsv1.Status_STATUS_BROKEN, fromActive, t0.Add(time.Minute)); changed {
		t.Error("breaking a broken connection changed it")
	}
	if n, _ := st.NotWrappedBy(ctx, "k2", 10); len(n) != 1 {
		t.Errorf("NotWrappedBy k2 = %d rows, want the one connection", len(n))
	}
	r, changed, err = st.SetStatus(ctx, id, connectionsv1.Status_STATUS_REVOKED, []connectionsv1.Status{active, connectionsv1.Status_STATUS_BROKEN}, t0.Add(2*time.Minute))
	if err != nil || !changed || r.Conn.GetStatus() != connectionsv1.Status_STATUS_REVOKED || r.Tokens.Access != nil || r.Tokens.Refresh != nil {
		t.Fatalf("revoke = %v tokens %q %q, %v", r.Conn, r.Tokens.Access, r.Tokens.Refresh, err)
	}
	if n, _ := st.NotWrappedBy(ctx, "k2", 10); len(n) != 0 {
		t.Errorf("NotWrappedBy lists a revoked connection")
	}
	_, _, err = st.SetStatus(ctx, "con_00000000000000000000000000", connectionsv1.Status_STATUS_REVOKED, fromActive, t0)
	sqldbtest.WantErr(t, "SetStatus of a missing connection", err, connections.ErrNotFound)
}

func testClaimRace(t *testing.T, db *sqldb.DB) {
	st, ctx := open(t, db), t.Context()
	a := put(t, st, "agent-a", "octo-a", t0)
	got, _ := st.ByID(ctx, a.Conn.GetId())
	sqldbtest.WarmPool(t, db, 20)
	var claimed atomic.Int32
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			ok, err := st.ClaimRefresh(ctx, got.Conn.GetId(), got.Generation, t0, t0.Add(30*time.Second))
			if err != nil {
				t.Error(err)
			}
			if ok {
				claimed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := claimed.Load(); n != 1 {
		t.Fatalf("%d claimers took the lease, want 1", n)
	}
	// The lease ends: a claimer after it takes it (its holder died).
	if ok, _ := st.ClaimRefresh(ctx, got.Conn.GetId(), got.Generation, t0.Add(29*time.Second), t0.Add(time.Minute)); ok {
		t.Error("a claim during the lease succeeded")
	}
	if ok, _ := st.ClaimRefresh(ctx, got.Conn.GetId(), got.Generation, t0.Add(30*time.Second), t0.Add(time.Minute)); !ok {
		t.Error("a claim after the lease ended failed")
	}
}

func testGenerations(t *testing.T, db *sqldb.DB) {
	st, ctx := open(t, db), t.Context()
	a := put(t, st, "agent-a", "octo-a", t0)
	r, _ := st.ByID(ctx, a.Conn.GetId())
	id, gen := r.Conn.GetId(), r.Generation
	if ok, _ := st.ClaimRefresh(ctx, id, gen, t0, t0.Add(time.Minute)); !ok {
		t.Fatal("claim failed")
	}
	fresh := connections.Sealed{KEK: "k1", Access: []byte("new-access"), Refresh: []byte("new-refresh")}
	if ok, err := st.Refreshed(ctx, id, gen, fresh, t0.Add(8*time.Hour), t0); !ok || err != nil {
		t.Fatalf("Refreshed = %v, %v", ok, err)
	}
	after, _ := st.ByID(ctx, id)
	if after.Generation == gen || !after.LeaseUntil.IsZero() || string(after.Tokens.Access) != "new-access" || !after.Conn.GetExpireTime().AsTime().Equal(t0.Add(8*time.Hour)) {
		t.Errorf("after Refreshed: gen %d lease %v access %q expire %v", after.Generation, after.LeaseUntil, after.Tokens.Access, after.Conn.GetExpireTime())
	}
	// A second refresh from the old generation (a replica that read before)
	// neither claims nor stores.
	if ok, _ := st.ClaimRefresh(ctx, id, gen, t0, t0.Add(time.Minute)); ok {
		t.Error("a claim at a past generation succeeded")
	}
	if ok, _ := st.Refreshed(ctx, id, gen, connections.Sealed{KEK: "k1", Access: []byte("stale")}, t0, t0); ok {
		t.Error("a refresh at a past generation was stored")
	}
	if ok, _ := st.Rewrapped(ctx, id, gen, connections.Sealed{KEK: "k2", Access: []byte("stale")}); ok {
		t.Error("a rewrap at a past generation was stored")
	}
	if ok, _ := st.Rewrapped(ctx, id, after.Generation, connections.Sealed{KEK: "k2", Access: []byte("rewrapped")}); !ok {
		t.Error("a rewrap at the current generation was not stored")
	}
	if n, _ := st.NotWrappedBy(ctx, "k2", 10); len(n) != 0 {
		t.Errorf("after rewrapping, %d connections are not wrapped by k2", len(n))
	}
}

func testLinkCalls(t *testing.T, db *sqldb.DB) {
	st, ctx := open(t, db), t.Context()
	call := func(key string) connections.LinkCall {
		return connections.LinkCall{Key: key, Now: t0, Until: t0.Add(time.Hour)}
	}
	rec := func(account string) connections.Record {
		return connections.Record{Conn: &connectionsv1.Connection{Id: ids.NewAt("con", t0), Agent: "agent-a", Provider: github, Account: account,
			Status: active, CreateTime: timestamppb.New(t0), UpdateTime: timestamppb.New(t0)}, Tokens: connections.Sealed{KEK: "k1", Access: []byte("s-" + account)}}
	}
	// Ended first: the link stores nothing.
	if ended, err := st.EndCall(ctx, "agent-a", call("mcp-1")); err != nil || !ended {
		t.Fatalf("EndCall = %v, %v", ended, err)
	}
	err := st.Put(ctx, rec("octo-late"), call("mcp-1"))
	sqldbtest.WantErr(t, "Put for an ended call", err, connections.ErrCallEnded)
	_, err = st.Get(ctx, "agent-a", github)
	sqldbtest.WantErr(t, "Get after the refused link", err, connections.ErrNotFound)
	// The same call of another agent is another call.
	if err := st.Put(ctx, connections.Record{Conn: &connectionsv1.Connection{Id: ids.NewAt("con", t0), Agent: "agent-b", Provider: github, Account: "octo-b",
		Status: active, CreateTime: timestamppb.New(t0), UpdateTime: timestamppb.New(t0)}, Tokens: connections.Sealed{KEK: "k1", Access: []byte("s")}}, call("mcp-1")); err != nil {
		t.Fatalf("agent-b's link under the same key: %v", err)
	}
	// Linked first: it stays, and ending it changes nothing.
	if err := st.Put(ctx, rec("octo-a"), call("mcp-2")); err != nil {
		t.Fatal(err)
	}
	if ended, err := st.EndCall(ctx, "agent-a", call("mcp-2")); err != nil || ended {
		t.Fatalf("EndCall of a linked call = %v, %v; want not ended", ended, err)
	}
	if err := st.Put(ctx, rec("octo-a2"), call("mcp-2")); err != nil {
		t.Errorf("a second link for a linked call: %v", err)
	}
	// Past its retention the record goes: the key is free again.
	later := connections.LinkCall{Key: "mcp-3", Now: t0.Add(2 * time.Hour), Until: t0.Add(3 * time.Hour)}
	if _, err := st.EndCall(ctx, "agent-a", later); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(ctx, rec("octo-a3"), connections.LinkCall{Key: "mcp-1", Now: later.Now, Until: later.Until}); err != nil {
		t.Errorf("a link under a key whose record expired: %v", err)
	}
}
