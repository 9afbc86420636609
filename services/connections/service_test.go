package connections_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/seal"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/githubtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
	"github.com/toolmesh/toolmesh/services/connections"
	"github.com/toolmesh/toolmesh/services/connections/connectionsstore"
)

var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

const github = connectionsv1.Provider_PROVIDER_GITHUB

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// testClock is a clock a test moves.
type testClock struct{ ns atomic.Int64 }

func newClock() *testClock { c := &testClock{}; c.ns.Store(t0.UnixNano()); return c }

func (c *testClock) now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func keyring(t *testing.T, keks ...seal.KEK) *seal.Envelope {
	t.Helper()
	e, err := seal.NewEnvelope(connections.SealPurpose, keks...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func kek(id string, b byte) seal.KEK {
	return seal.KEK{ID: id, Key: bytes.Repeat([]byte{b}, seal.KeySize)}
}

// replica is one connections service process over a shared database.
type replica struct {
	svc  *connections.Service
	c    connectionsv1connect.ConnectionsServiceClient
	logs *logtest.Buffer
}

func startReplica(t *testing.T, db *sqldb.DB, cfg connections.Config) *replica {
	t.Helper()
	st := sqldbtest.OpenStore(t, db, connectionsstore.Open)
	logs := &logtest.Buffer{}
	log := logging.New(logs, slog.LevelDebug)
	cfg.Log = log
	if cfg.Envelope == nil {
		cfg.Envelope = keyring(t, kek("k1", 1))
	}
	svc, err := connections.New(st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.StartWith(t, servertest.Options{Log: log}, svc.Registration())
	return &replica{svc: svc, c: connectionsv1connect.NewConnectionsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...), logs: logs}
}

func as(agent string, roles ...string) context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Roles: roles}})
}

var (
	service = as("toolmesh-github", mesh.RoleService)
	owner   = as("owner", mesh.RoleOwner)
)

func store(t *testing.T, r *replica, agent, account, access, refresh string, expire time.Time) *connectionsv1.Connection {
	t.Helper()
	req := &connectionsv1.StoreConnectionRequest{Agent: agent, Provider: github, Account: account, Scopes: []string{"repo", "read:org"},
		AccessToken: access, RefreshToken: refresh}
	if !expire.IsZero() {
		req.ExpireTime = timestamppb.New(expire)
	}
	res, err := r.c.StoreConnection(service, req)
	if err != nil {
		t.Fatalf("StoreConnection for %s: %v", agent, err)
	}
	return res.GetConnection()
}

func token(t *testing.T, r *replica, agent string) *connectionsv1.GetTokenResponse {
	t.Helper()
	res, err := r.c.GetToken(service, &connectionsv1.GetTokenRequest{Agent: agent, Provider: github})
	if err != nil {
		t.Fatalf("GetToken for %s: %v", agent, err)
	}
	return res
}

func code(t *testing.T, err error) connect.Code { t.Helper(); return servertest.Code(t, err) }

// TestTokensNeverShow: what an agent or the owner lists, what the service
// logs and what the database file holds never carry a token in clear, and
// only the service role obtains one.
func TestTokensNeverShow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "connections.db")
	r := startReplica(t, sqldbtest.Open(t, path), connections.Config{})
	const access, refresh = "gho_ACCESSaccessACCESS0001", "ghr_REFRESHrefreshREFRESH01"
	a := store(t, r, "agent-a", "octo-a", access, refresh, time.Time{})
	store(t, r, "agent-b", "octo-b", "gho_ACCESSofB", "", time.Time{})

	if got := token(t, r, "agent-a").GetToken(); got.GetAccessToken() != access || got.GetConnection().GetAccount() != "octo-a" {
		t.Fatalf("GetToken = %v, want a's token", got.GetConnection())
	}
	own, err := r.c.ListConnections(as("agent-a"), &connectionsv1.ListConnectionsRequest{})
	if err != nil || len(own.GetConnections()) != 1 || own.GetConnections()[0].GetId() != a.GetId() {
		t.Fatalf("agent-a lists %v, %v; want its own connection only", own.GetConnections(), err)
	}
	if own.GetConnections()[0].GetUseTime() == nil || own.GetConnections()[0].GetStatus() != connectionsv1.Status_STATUS_ACTIVE {
		t.Errorf("a used, active connection lists as %v", own.GetConnections()[0])
	}
	all, err := r.c.ListConnections(owner, &connectionsv1.ListConnectionsRequest{})
	if err != nil || all.GetPage().GetTotal() != 2 {
		t.Fatalf("the owner lists %v, %v; want both agents'", all, err)
	}
	_, err = r.c.ListConnections(as("agent-a"), &connectionsv1.ListConnectionsRequest{Agent: "agent-b"})
	if code(t, err) != connect.CodePermissionDenied {
		t.Errorf("agent-a listing agent-b's: %v, want permission_denied", err)
	}

	// Only the service role obtains a token or stores one.
	for who, ctx := range map[string]context.Context{"the agent itself": as("agent-a"), "the owner": owner} {
		if _, err := r.c.GetToken(ctx, &connectionsv1.GetTokenRequest{Agent: "agent-a", Provider: github}); code(t, err) != connect.CodePermissionDenied {
			t.Errorf("GetToken as %s: %v, want permission_denied", who, err)
		}
		if _, err := r.c.StoreConnection(ctx, &connectionsv1.StoreConnectionRequest{Agent: "agent-a", Provider: github, Account: "evil", AccessToken: "x"}); code(t, err) != connect.CodePermissionDenied {
			t.Errorf("StoreConnection as %s: %v, want permission_denied", who, err)
		}
	}

	listed, _ := protojson.Marshal(all)
	for what, text := range map[string]string{"the owner's list": string(listed), "the logs": r.logs.String(), "the database": dbBytes(t, path)} {
		for _, secret := range []string{access, refresh, "gho_ACCESSofB"} {
			if strings.Contains(text, secret) {
				t.Errorf("%s holds a token in clear (%s…)", what, secret[:8])
			}
		}
	}
	if len(r.logs.Events("connections.linked")) != 2 {
		t.Errorf("logs: %s; want one connections.linked event per link", r.logs.String())
	}
}

// dbBytes is what the SQLite database at path holds on disk, its WAL
// included.
func dbBytes(t *testing.T, path string) string {
	t.Helper()
	var all []byte
	for _, p := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(p)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if len(all) == 0 {
		t.Fatal("the database file is empty")
	}
	return string(all)
}

// TestLifecycle: not linked, linked, broken (the next call asks again),
// linked again, unlinked by the owner (tokens erased).
func TestLifecycle(t *testing.T) {
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{})
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_NONE {
		t.Fatalf("GetToken before any link = %v, want not linked (none)", nl)
	}
	c := store(t, r, "agent-a", "octo-a", "tok-1", "", time.Time{})
	if _, err := r.c.MarkBroken(as("agent-a"), &connectionsv1.MarkBrokenRequest{Id: c.GetId()}); code(t, err) != connect.CodePermissionDenied {
		t.Errorf("MarkBroken by the agent: %v, want permission_denied", err)
	}
	for range 2 {
		res, err := r.c.MarkBroken(service, &connectionsv1.MarkBrokenRequest{Id: c.GetId()})
		if err != nil || res.GetConnection().GetStatus() != connectionsv1.Status_STATUS_BROKEN {
			t.Fatalf("MarkBroken = %v, %v", res, err)
		}
	}
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_BROKEN || nl.GetConnection().GetId() != c.GetId() {
		t.Fatalf("GetToken of a broken connection = %v, want not linked (broken)", nl)
	}
	c2 := store(t, r, "agent-a", "octo-a2", "tok-2", "", time.Time{})
	if got := token(t, r, "agent-a").GetToken(); got.GetAccessToken() != "tok-2" || got.GetConnection().GetId() != c2.GetId() {
		t.Fatalf("GetToken after linking again = %v", got.GetConnection())
	}
	if _, err := r.c.DeleteConnection(as("agent-a"), &connectionsv1.DeleteConnectionRequest{Id: c2.GetId()}); code(t, err) != connect.CodePermissionDenied {
		t.Errorf("DeleteConnection by the agent: %v, want permission_denied", err)
	}
	del, err := r.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: c2.GetId()})
	if err != nil || del.GetConnection().GetStatus() != connectionsv1.Status_STATUS_REVOKED {
		t.Fatalf("DeleteConnection = %v, %v", del, err)
	}
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_REVOKED {
		t.Fatalf("GetToken after unlinking = %v, want not linked (revoked)", nl)
	}
	if _, err := r.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: c.GetId()}); code(t, err) != connect.CodeNotFound {
		t.Errorf("DeleteConnection of the replaced connection: %v, want not_found", err)
	}
}

// TestRotation: tokens stored under k1 still open once k2 is the newest,
// Rewrap moves them to k2, and after k1 is removed every token opens.
func TestRotation(t *testing.T) {
	dsn := filepath.Join(t.TempDir(), "connections.db")
	db := sqldbtest.Open(t, dsn)
	old := startReplica(t, db, connections.Config{Envelope: keyring(t, kek("k1", 1))})
	store(t, old, "agent-a", "octo-a", "tok-a", "ref-a", time.Time{})
	store(t, old, "agent-b", "octo-b", "tok-b", "", time.Time{})

	rotated := startReplica(t, db, connections.Config{Envelope: keyring(t, kek("k1", 1), kek("k2", 2))})
	if got := token(t, rotated, "agent-a").GetToken().GetAccessToken(); got != "tok-a" {
		t.Fatalf("a token sealed under k1, read with k2 newest: %q", got)
	}
	store(t, rotated, "agent-c", "octo-c", "tok-c", "", time.Time{})
	n, err := rotated.svc.Rewrap(context.Background())
	if err != nil || n != 2 {
		t.Fatalf("Rewrap = %d, %v; want the 2 connections under k1", n, err)
	}
	if n, err := rotated.svc.Rewrap(context.Background()); err != nil || n != 0 {
		t.Errorf("a second Rewrap = %d, %v; want nothing left", n, err)
	}
	newOnly := startReplica(t, db, connections.Config{Envelope: keyring(t, kek("k2", 2))})
	for agent, want := range map[string]string{"agent-a": "tok-a", "agent-b": "tok-b", "agent-c": "tok-c"} {
		if got := token(t, newOnly, agent).GetToken().GetAccessToken(); got != want {
			t.Errorf("%s's token with only k2 configured: %q, want %q", agent, got, want)
		}
	}
	// A replica whose keyring lacks the key answers an error, not a token
	// or a not-linked that would ask the person to link again.
	if _, err := old.c.GetToken(service, &connectionsv1.GetTokenRequest{Agent: "agent-c", Provider: github}); code(t, err) != connect.CodeInternal {
		t.Errorf("GetToken on a replica without k2: %v, want internal", err)
	}
}

// countingRefresher refreshes by counting, answering "new-<n>".
type countingRefresher struct {
	n       atomic.Int32
	gate    chan struct{} // when set, each refresh waits for it
	started chan struct{} // when set, gets one value per refresh started
	refuse  bool
	clock   *testClock
	lastOld sync.Map
}

func (f *countingRefresher) Refresh(ctx context.Context, refreshToken string) (connections.Tokens, error) {
	n := f.n.Add(1)
	f.lastOld.Store(n, refreshToken)
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return connections.Tokens{}, ctx.Err()
		}
	}
	if f.refuse {
		return connections.Tokens{}, connections.ErrRefreshRefused
	}
	return connections.Tokens{Access: "fresh-access", Refresh: "fresh-refresh", Expire: f.clock.now().Add(8 * time.Hour)}, nil
}

// TestRefreshOnceAcrossReplicas: 20 concurrent calls across two replicas
// over one database, for a token about to expire, refresh it exactly once,
// and every call answers the refreshed token.
func TestRefreshOnceAcrossReplicas(t *testing.T) {
	sqldbtest.Each(t, &pg, func(t *testing.T, e sqldbtest.Engine) {
		dsn := e.NewDSN(t)
		clk := newClock()
		f := &countingRefresher{clock: clk, gate: make(chan struct{}), started: make(chan struct{}, 20)}
		cfg := connections.Config{Now: clk.now, Refreshers: map[connectionsv1.Provider]connections.Refresher{github: f}}
		replicas := []*replica{startReplica(t, sqldbtest.Open(t, dsn), cfg), startReplica(t, sqldbtest.Open(t, dsn), cfg)}
		store(t, replicas[0], "agent-a", "octo-a", "old-access", "old-refresh", t0.Add(time.Hour))
		clk.advance(58 * time.Minute) // within RefreshBefore of the expiry

		var wg sync.WaitGroup
		got := make([]string, 20)
		errs := make([]error, 20)
		for i := range 20 {
			wg.Go(func() {
				res, err := replicas[i%2].c.GetToken(service, &connectionsv1.GetTokenRequest{Agent: "agent-a", Provider: github})
				got[i], errs[i] = res.GetToken().GetAccessToken(), err
			})
		}
		// The refresh is held until it has started: every caller is then
		// either waiting for it or about to find it done.
		<-f.started
		close(f.gate)
		wg.Wait()
		for i := range 20 {
			if errs[i] != nil || got[i] != "fresh-access" {
				t.Errorf("call %d: %q, %v; want the refreshed token", i, got[i], errs[i])
			}
		}
		if n := f.n.Load(); n != 1 {
			t.Errorf("%d refreshes, want exactly 1", n)
		}
		if old, _ := f.lastOld.Load(int32(1)); old != "old-refresh" {
			t.Errorf("refreshed with %v, want the stored refresh token", old)
		}
		// The refresh token the provider issued is the one used next time.
		clk.advance(8 * time.Hour)
		f.gate = nil
		if got := token(t, replicas[1], "agent-a").GetToken().GetAccessToken(); got != "fresh-access" || f.n.Load() != 2 {
			t.Fatalf("after the second expiry: %q after %d refreshes", got, f.n.Load())
		}
		if old, _ := f.lastOld.Load(int32(2)); old != "fresh-refresh" {
			t.Errorf("second refresh used %v, want the refresh token the first one issued", old)
		}
	})
}

// TestRefreshRefused: a refresh token the provider refuses breaks the
// connection, and the call is told to link again.
func TestRefreshRefused(t *testing.T) {
	clk := newClock()
	f := &countingRefresher{clock: clk, refuse: true}
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{Now: clk.now, Refreshers: map[connectionsv1.Provider]connections.Refresher{github: f}})
	store(t, r, "agent-a", "octo-a", "old-access", "old-refresh", t0.Add(time.Minute))
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_BROKEN {
		t.Fatalf("GetToken after a refused refresh = %v, want not linked (broken)", nl)
	}
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_BROKEN || f.n.Load() != 1 {
		t.Errorf("the next GetToken = %v after %d refreshes, want broken without refreshing again", nl, f.n.Load())
	}
	// Without a refresher, a token is used until it expires, then not.
	plain := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{Now: clk.now})
	store(t, plain, "agent-b", "octo-b", "b-access", "b-refresh", t0.Add(time.Minute))
	if got := token(t, plain, "agent-b").GetToken().GetAccessToken(); got != "b-access" {
		t.Errorf("an unexpired token without a refresher: %q", got)
	}
	clk.advance(time.Minute)
	if nl := token(t, plain, "agent-b").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_EXPIRED {
		t.Errorf("an expired token without a refresher: %v, want not linked (expired)", nl)
	}
}

// TestUnlinkRevokesUpstream: unlinking revokes the token at GitHub (the
// applications API, with the app's credentials) before erasing it; a
// token GitHub no longer knows still unlinks; GitHub not answering keeps
// the connection as it was, and the unlink made again revokes it.
// Linking an agent again replaces its connection and revokes the token
// it replaces at GitHub: no live token is left that the mesh no longer
// holds. The same token stored again is not revoked.
func TestRelinkRevokesTheReplacedToken(t *testing.T) {
	gh := githubtest.Start(t, "Iv1.relink", "relink-secret")
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{Revokers: map[connectionsv1.Provider]connections.Revoker{
		github: connections.NewGitHubRevoker(gh.URL, gh.ClientID, gh.ClientSecret, nil)}})
	first, second := gh.Issue("octo-a"), gh.Issue("octo-a")
	store(t, r, "agent-a", "octo-a", first, "", time.Time{})
	store(t, r, "agent-a", "octo-a", second, "", time.Time{})
	if got := gh.Revoked(); len(got) != 1 || got[0] != first {
		t.Fatalf("GitHub revoked %d tokens after the relink, want the replaced one", len(got))
	}
	if got := token(t, r, "agent-a").GetToken().GetAccessToken(); got != second {
		t.Fatal("the relinked connection does not hold the new token")
	}
	store(t, r, "agent-a", "octo-a", second, "", time.Time{})
	if n := len(gh.Revoked()); n != 1 {
		t.Errorf("GitHub revoked %d tokens after the same token was stored again, want still 1", n)
	}
}

func TestUnlinkRevokesUpstream(t *testing.T) {
	gh := githubtest.Start(t, "Iv1.unlink", "unlink-secret")
	db := sqldbtest.SQLite().Open(t)
	revokers := func(url string) connections.Config {
		return connections.Config{Revokers: map[connectionsv1.Provider]connections.Revoker{
			github: connections.NewGitHubRevoker(url, gh.ClientID, gh.ClientSecret, nil)}}
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	t.Cleanup(down.Close)

	tokA := gh.Issue("octo-a")
	broken := startReplica(t, db, revokers(down.URL))
	c := store(t, broken, "agent-a", "octo-a", tokA, "", time.Time{})
	if _, err := broken.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: c.GetId()}); code(t, err) != connect.CodeUnavailable {
		t.Fatalf("unlink while GitHub does not answer: %v, want unavailable", err)
	}
	if got := token(t, broken, "agent-a").GetToken().GetAccessToken(); got != tokA {
		t.Fatal("the connection GitHub did not revoke was not kept as it was")
	}

	r := startReplica(t, db, revokers(gh.URL))
	del, err := r.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: c.GetId()})
	if err != nil || del.GetConnection().GetStatus() != connectionsv1.Status_STATUS_REVOKED {
		t.Fatalf("unlink = %v, %v", del, err)
	}
	if got := gh.Revoked(); len(got) != 1 || got[0] != tokA {
		t.Errorf("GitHub revoked %d tokens, want agent-a's one", len(got))
	}
	if ev := r.logs.Events("connections.unlinked"); len(ev) != 1 || ev[0]["upstream"] != "revoked" {
		t.Errorf("unlinked events %v, want one, revoked upstream", ev)
	}
	// Unlinking again changes nothing and reaches no GitHub.
	if _, err := r.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: c.GetId()}); err != nil {
		t.Fatal(err)
	}
	if n := len(gh.Revoked()); n != 1 {
		t.Errorf("GitHub revoked %d tokens after the second unlink, want still 1", n)
	}

	cb := store(t, r, "agent-b", "octo-b", "gho_"+strings.Repeat("x", 36), "", time.Time{})
	if _, err := r.c.DeleteConnection(owner, &connectionsv1.DeleteConnectionRequest{Id: cb.GetId()}); err != nil {
		t.Fatalf("unlink of a token GitHub no longer knows: %v", err)
	}
	if ev := r.logs.Events("connections.unlinked"); len(ev) != 2 || ev[1]["upstream"] != "already" {
		t.Errorf("unlinked events %v, want the second already revoked upstream", ev)
	}
	if strings.Contains(r.logs.String()+broken.logs.String(), tokA) || strings.Contains(r.logs.String(), gh.ClientSecret) {
		t.Error("a token or the client secret is in the logs")
	}
}

// TestRevokeAgent: the connections of a retired agent are revoked at
// GitHub and unlinked, another agent's are not; doing it again changes
// nothing; only the service role or the owner may.
func TestRevokeAgent(t *testing.T) {
	gh := githubtest.Start(t, "Iv1.retire", "retire-secret")
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{Revokers: map[connectionsv1.Provider]connections.Revoker{
		github: connections.NewGitHubRevoker(gh.URL, gh.ClientID, gh.ClientSecret, nil)}})
	tokA, tokB := gh.Issue("octo-a"), gh.Issue("octo-b")
	store(t, r, "agent-a", "octo-a", tokA, "", time.Time{})
	store(t, r, "agent-b", "octo-b", tokB, "", time.Time{})
	if _, err := r.c.RevokeAgent(as("agent-b"), &connectionsv1.RevokeAgentRequest{Agent: "agent-a"}); code(t, err) != connect.CodePermissionDenied {
		t.Fatalf("RevokeAgent by an agent: %v, want permission_denied", err)
	}
	res, err := r.c.RevokeAgent(service, &connectionsv1.RevokeAgentRequest{Agent: "agent-a"})
	if err != nil || len(res.GetConnections()) != 1 || res.GetConnections()[0].GetStatus() != connectionsv1.Status_STATUS_REVOKED {
		t.Fatalf("RevokeAgent = %v, %v", res, err)
	}
	if got := gh.Revoked(); len(got) != 1 || got[0] != tokA {
		t.Errorf("GitHub revoked %d tokens, want agent-a's one", len(got))
	}
	if nl := token(t, r, "agent-a").GetNotLinked(); nl.GetReason() != connectionsv1.NotLinked_REASON_REVOKED {
		t.Errorf("agent-a's token after RevokeAgent = %v, want not linked (revoked)", nl)
	}
	if got := token(t, r, "agent-b").GetToken().GetAccessToken(); got != tokB {
		t.Error("agent-b's connection changed")
	}
	again, err := r.c.RevokeAgent(owner, &connectionsv1.RevokeAgentRequest{Agent: "agent-a"})
	if err != nil || len(again.GetConnections()) != 0 || len(gh.Revoked()) != 1 {
		t.Errorf("RevokeAgent again = %v, %v (GitHub revoked %d), want nothing more", again, err, len(gh.Revoked()))
	}
}

// TestLinkForAnEndedCall: a link made for a call that ended (EndLinkCall,
// the service role only) stores nothing and says so (failed_precondition);
// the agent keeps the connection it had; a call linked first cannot end.
func TestLinkForAnEndedCall(t *testing.T) {
	r := startReplica(t, sqldbtest.SQLite().Open(t), connections.Config{})
	before := store(t, r, "agent-a", "octo-a", "tok-1", "", time.Time{})
	end := &connectionsv1.EndLinkCallRequest{Agent: "agent-a", CallKey: "mcp-cancelled"}
	if _, err := r.c.EndLinkCall(as("agent-a"), end); code(t, err) != connect.CodePermissionDenied {
		t.Errorf("EndLinkCall by the agent: %v, want permission_denied", err)
	}
	if res, err := r.c.EndLinkCall(service, end); err != nil || !res.GetEnded() {
		t.Fatalf("EndLinkCall = %v, %v", res, err)
	}
	_, err := r.c.StoreConnection(service, &connectionsv1.StoreConnectionRequest{Agent: "agent-a", Provider: github, Account: "octo-late",
		AccessToken: "tok-late", CallKey: "mcp-cancelled"})
	if code(t, err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("StoreConnection for the ended call: %v, want failed_precondition", err)
	}
	if got := token(t, r, "agent-a").GetToken(); got.GetAccessToken() != "tok-1" || got.GetConnection().GetId() != before.GetId() {
		t.Errorf("the agent's connection after the refused link = %v, want the one it had", got.GetConnection())
	}
	if _, err := r.c.StoreConnection(service, &connectionsv1.StoreConnectionRequest{Agent: "agent-a", Provider: github, Account: "octo-a2",
		AccessToken: "tok-2", CallKey: "mcp-wanted"}); err != nil {
		t.Fatalf("StoreConnection for a call still waiting: %v", err)
	}
	if res, err := r.c.EndLinkCall(service, &connectionsv1.EndLinkCallRequest{Agent: "agent-a", CallKey: "mcp-wanted"}); err != nil || res.GetEnded() {
		t.Errorf("EndLinkCall of a linked call = %v, %v; want not ended", res, err)
	}
	if got := token(t, r, "agent-a").GetToken(); got.GetAccessToken() != "tok-2" {
		t.Errorf("the agent's token after ending its linked call: %v", got.GetConnection())
	}
	if strings.Contains(r.logs.String(), "tok-late") {
		t.Error("the refused link's token is in the log")
	}
}
