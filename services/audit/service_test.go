package audit_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/pgtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// env is one running audit service with its database and its log.
type env struct {
	srv *servertest.Server
	svc *audit.Service
	db  *sqldb.DB
	log *logtest.Buffer
	c   auditv1connect.AuditServiceClient
	// checkpoints is the service's checkpoint log and signer its key (""
	// and nil without one).
	checkpoints string
	signer      *auditcheckpoint.Signer
}

// pg is the PostgreSQL cluster of this test binary, started by the first
// test that needs it.
var pg pgtest.Shared

func TestMain(m *testing.M) { os.Exit(pg.Run(m)) }

// start serves the audit service on a fresh database of engine db. The
// tests use only portable SQL (and dialect-aware tampering), so they hold on
// every engine. With a signer in cfg, the service writes its checkpoints to
// a fresh log file of its own.
func start(t *testing.T, cfg audit.Config, db sqldbtest.Engine) *env {
	t.Helper()
	sdb := db.Open(t)
	st, err := auditstore.Open(context.Background(), sdb)
	if err != nil {
		t.Fatal(err)
	}
	buf := &logtest.Buffer{}
	cfg.Log = logging.New(buf, nil)
	if cfg.Signer != nil {
		cfg.CheckpointLog = filepath.Join(t.TempDir(), "audit-checkpoints.log")
	}
	svc := audit.New(st, cfg)
	return &env{srv: servertest.Start(t, svc.Registration()), svc: svc, db: sdb, log: buf, checkpoints: cfg.CheckpointLog, signer: cfg.Signer}
}

// eachBackend runs fn against a fresh server on each database, once over
// Connect and once over gRPC.
func eachBackend(t *testing.T, cfg audit.Config, fn func(t *testing.T, e *env)) {
	sqldbtest.Each(t, &pg, func(t *testing.T, db sqldbtest.Engine) {
		var e *env
		servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
			e = start(t, cfg, db)
			return e.srv
		}, auditv1connect.NewAuditServiceClient, func(t *testing.T, c auditv1connect.AuditServiceClient) {
			e.c = c
			fn(t, e)
		})
	})
}

// startEach runs fn against a fresh Connect server on each database.
func startEach(t *testing.T, cfg audit.Config, fn func(t *testing.T, e *env)) {
	sqldbtest.Each(t, &pg, func(t *testing.T, db sqldbtest.Engine) {
		e := start(t, cfg, db)
		e.c = auditv1connect.NewAuditServiceClient(e.srv.Client(), e.srv.URL, servertest.ClientOptions(servertest.Protocols()[0].Opts)...)
		fn(t, e)
	})
}

// asEdge acts as the edge, the one caller allowed to append.
func asEdge() context.Context {
	return servertest.As(context.Background(), audittrail.EdgeSubject)
}

// asReader acts as an ordinary identified caller.
func asReader() context.Context { return servertest.As(context.Background(), "operator") }

func appendReq(i int) *auditv1.AppendRequest {
	return &auditv1.AppendRequest{
		CallId:     fmt.Sprintf("mcp-call-%03d", i),
		Actor:      fmt.Sprintf("owner-%d", i%2),
		Tool:       []string{"credits_grant", "agents_register"}[i%2],
		Reason:     fmt.Sprintf("reason %d", i),
		ArgsDigest: fmt.Sprintf("sha256:%064x", i),
		Outcome:    auditv1.Outcome_OUTCOME_SUCCEEDED,
	}
}

// appendN appends records 1..n and returns them in chain order.
func appendN(t *testing.T, e *env, n int) []*auditv1.Record {
	t.Helper()
	return appendRange(t, e, 1, n)
}

// appendRange appends records from..to and returns them in chain order.
func appendRange(t *testing.T, e *env, from, to int) []*auditv1.Record {
	t.Helper()
	out := make([]*auditv1.Record, 0, to-from+1)
	for i := from; i <= to; i++ {
		res, err := e.c.Append(asEdge(), appendReq(i))
		if err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		out = append(out, res.GetRecord())
	}
	return out
}

func verify(t *testing.T, e *env, anchor *auditv1.Checkpoint) *auditv1.VerifyResponse {
	t.Helper()
	res, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Anchor: anchor})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return res
}

func TestAppendChainsRecords(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 123_456_789, time.UTC)
	eachBackend(t, audit.Config{Now: func() time.Time { return now }}, func(t *testing.T, e *env) {
		recs := appendN(t, e, 4)
		prev := audit.GenesisHash
		for i, r := range recs {
			want := appendReq(i + 1)
			if r.GetSeq() != int64(i+1) || r.GetActor() != want.GetActor() || r.GetTool() != want.GetTool() ||
				r.GetReason() != want.GetReason() || r.GetArgsDigest() != want.GetArgsDigest() || r.GetCallId() != want.GetCallId() ||
				r.GetOutcome() != auditv1.Outcome_OUTCOME_SUCCEEDED {
				t.Errorf("record %d = %v, want seq %d carrying %v", i+1, r, i+1, want)
			}
			if !r.GetTime().AsTime().Equal(now.Truncate(time.Millisecond)) {
				t.Errorf("record %d time = %v, want the service clock at millisecond precision", i+1, r.GetTime().AsTime())
			}
			if r.GetPrevHash() != prev {
				t.Errorf("record %d prev_hash = %s, want the previous record's hash %s", i+1, r.GetPrevHash(), prev)
			}
			c, err := audit.Canonical(r)
			if err != nil {
				t.Fatal(err)
			}
			if got := audit.ChainHash(prev, c); r.GetHash() != got {
				t.Errorf("record %d hash = %s, want SHA-256(prev_hash + canonical JSON) = %s", i+1, r.GetHash(), got)
			}
			prev = r.GetHash()
		}
		res := verify(t, e, nil)
		want := &auditv1.VerifyResponse{Intact: true, VerifiedRecords: 4, Head: &auditv1.Checkpoint{Seq: 4, Hash: prev}}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("Verify (-want +got):\n%s", diff)
		}
		if n := boundaryEvents(e.log); n != 0 {
			t.Errorf("an intact chain logged %d boundary.validation_failed events, want 0", n)
		}
	})
}

func TestEmptyTrailVerifies(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		res := verify(t, e, nil)
		want := &auditv1.VerifyResponse{Intact: true, Head: &auditv1.Checkpoint{Seq: 0, Hash: audit.GenesisHash}}
		if diff := cmp.Diff(want, res, protocmp.Transform()); diff != "" {
			t.Errorf("Verify of an empty trail (-want +got):\n%s", diff)
		}
	})
}

func TestHeadFollowsTheLastRecord(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		head := func() *auditv1.Checkpoint {
			t.Helper()
			res, err := e.c.Head(asReader(), &auditv1.HeadRequest{})
			if err != nil {
				t.Fatalf("Head: %v", err)
			}
			return res.GetHead()
		}
		if diff := cmp.Diff(&auditv1.Checkpoint{Seq: 0, Hash: audit.GenesisHash}, head(), protocmp.Transform()); diff != "" {
			t.Errorf("Head of an empty trail (-want +got):\n%s", diff)
		}
		recs := appendN(t, e, 2)
		if diff := cmp.Diff(&auditv1.Checkpoint{Seq: 2, Hash: recs[1].GetHash()}, head(), protocmp.Transform()); diff != "" {
			t.Errorf("Head after two records (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(verify(t, e, nil).GetHead(), head(), protocmp.Transform()); diff != "" {
			t.Errorf("Head differs from the head Verify reports (-verify +head):\n%s", diff)
		}
		if _, err := e.c.Head(context.Background(), &auditv1.HeadRequest{}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("Head without identity: %v, want unauthenticated", err)
		}
	})
}

func TestAppendIsIdempotentByCallID(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		first, err := e.c.Append(asEdge(), appendReq(1))
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.c.Append(asEdge(), appendReq(1))
		if err != nil {
			t.Fatalf("retried append: %v", err)
		}
		if !again.GetReplayed() || !proto.Equal(first.GetRecord(), again.GetRecord()) {
			t.Errorf("retry = %v, want the first record %v marked replayed", again, first.GetRecord())
		}
		changed := appendReq(1)
		changed.Reason = "a different reason"
		if _, err := e.c.Append(asEdge(), changed); servertest.Code(t, err) != connect.CodeAlreadyExists {
			t.Errorf("same call id, other contents: code %v, want already_exists", connect.CodeOf(err))
		}
		second, err := e.c.Append(asEdge(), appendReq(2))
		if err != nil {
			t.Fatal(err)
		}
		if second.GetRecord().GetSeq() != 2 || second.GetRecord().GetPrevHash() != first.GetRecord().GetHash() {
			t.Errorf("next record after a replay = %v, want seq 2 linked to record 1", second.GetRecord())
		}
		if res := verify(t, e, nil); !res.GetIntact() || res.GetHead().GetSeq() != 2 {
			t.Errorf("after a replay and a conflict the trail is %v, want 2 intact records", res)
		}
	})
}

func TestOnlyTheEdgeMayAppend(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		if _, err := e.c.Append(context.Background(), appendReq(1)); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("append without identity: code %v, want unauthenticated", connect.CodeOf(err))
		}
		if _, err := e.c.Append(servertest.As(context.Background(), "agent-a"), appendReq(1)); servertest.Code(t, err) != connect.CodePermissionDenied {
			t.Errorf("append by an agent: code %v, want permission_denied", connect.CodeOf(err))
		}
		if _, err := e.c.List(context.Background(), &auditv1.ListRequest{}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("list without identity: code %v, want unauthenticated", connect.CodeOf(err))
		}
		if _, err := e.c.Verify(context.Background(), &auditv1.VerifyRequest{}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("verify without identity: code %v, want unauthenticated", connect.CodeOf(err))
		}
		if res := verify(t, e, nil); res.GetHead().GetSeq() != 0 {
			t.Errorf("refused appends stored records: head %v", res.GetHead())
		}
	})
	t.Run("configured appenders", func(t *testing.T) {
		startEach(t, audit.Config{Appenders: []string{"edge-2"}}, func(t *testing.T, e *env) {
			if _, err := e.c.Append(servertest.As(context.Background(), "edge-2"), appendReq(1)); err != nil {
				t.Errorf("append by a configured appender: %v", err)
			}
			if _, err := e.c.Append(asEdge(), appendReq(2)); servertest.Code(t, err) != connect.CodePermissionDenied {
				t.Errorf("append by the default edge subject when others are configured: code %v, want permission_denied", connect.CodeOf(err))
			}
		})
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		edit := func(f func(r *auditv1.AppendRequest)) func() error {
			return func() error {
				r := appendReq(1)
				f(r)
				_, err := e.c.Append(asEdge(), r)
				return err
			}
		}
		ts := func(s string) *timestamppb.Timestamp {
			tm, _ := time.Parse(time.RFC3339, s)
			return timestamppb.New(tm)
		}
		cases := []struct {
			name string
			call func() error
			want map[string][]string
		}{
			{"empty append", func() error { _, err := e.c.Append(asEdge(), &auditv1.AppendRequest{}); return err }, map[string][]string{
				"call_id": {"required"}, "actor": {"required"}, "tool": {"required"}, "reason": {"required"}, "args_digest": {"required"}, "outcome": {"required"},
			}},
			{"blank reason", edit(func(r *auditv1.AppendRequest) { r.Reason = " \t\n" }), map[string][]string{"reason": {"string.non_blank"}}},
			{"blank actor", edit(func(r *auditv1.AppendRequest) { r.Actor = "   " }), map[string][]string{"actor": {"string.non_blank"}}},
			{"reason too long", edit(func(r *auditv1.AppendRequest) { r.Reason = strings.Repeat("x", 4001) }), map[string][]string{"reason": {"string.max_len"}}},
			{"digest without algorithm", edit(func(r *auditv1.AppendRequest) { r.ArgsDigest = strings.Repeat("a", 64) }), map[string][]string{"args_digest": {"string.pattern"}}},
			{"tool not a tool name", edit(func(r *auditv1.AppendRequest) { r.Tool = "Credits Grant" }), map[string][]string{"tool": {"string.pattern"}}},
			{"actor with a control character", edit(func(r *auditv1.AppendRequest) { r.Actor = "owner\x00" }), map[string][]string{"actor": {"string.pattern"}}},
			{"call id with a space", edit(func(r *auditv1.AppendRequest) { r.CallId = "call 1" }), map[string][]string{"call_id": {"string.pattern"}}},
			{"undefined outcome", edit(func(r *auditv1.AppendRequest) { r.Outcome = 7 }), map[string][]string{"outcome": {"enum.defined_only"}}},
			{"list: since after until", func() error {
				_, err := e.c.List(asReader(), &auditv1.ListRequest{Since: ts("2026-03-02T00:00:00Z"), Until: ts("2026-03-01T00:00:00Z")})
				return err
			}, map[string][]string{"": {"since_before_until"}}},
			{"list: bad tool filter", func() error {
				_, err := e.c.List(asReader(), &auditv1.ListRequest{Tool: "no-such tool"})
				return err
			}, map[string][]string{"tool": {"string.pattern"}}},
			{"list: limit over the bound", func() error {
				_, err := e.c.List(asReader(), &auditv1.ListRequest{Limit: 201})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"list: negative offset", func() error {
				_, err := e.c.List(asReader(), &auditv1.ListRequest{Offset: -1})
				return err
			}, map[string][]string{"offset": {"int32.gte_lte"}}},
			{"verify: anchor without hash", func() error {
				_, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Anchor: &auditv1.Checkpoint{Seq: 3}})
				return err
			}, map[string][]string{"anchor.hash": {"required"}}},
			{"verify: anchor with a malformed hash", func() error {
				_, err := e.c.Verify(asReader(), &auditv1.VerifyRequest{Anchor: &auditv1.Checkpoint{Seq: 3, Hash: "ABC"}})
				return err
			}, map[string][]string{"anchor.hash": {"string.pattern"}}},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, servertest.Violations(t, tc.call())); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		if res := verify(t, e, nil); res.GetHead().GetSeq() != 0 {
			t.Errorf("rejected requests stored records: head %v", res.GetHead())
		}
	})
}

func TestListFiltersAndPages(t *testing.T) {
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := day
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	eachBackend(t, audit.Config{Now: clock}, func(t *testing.T, e *env) {
		// Records 1..6, one hour apart; odd ones by owner-1 with
		// agents_register, even ones by owner-0 with credits_grant.
		for i := 1; i <= 6; i++ {
			mu.Lock()
			now = day.Add(time.Duration(i) * time.Hour)
			mu.Unlock()
			if _, err := e.c.Append(asEdge(), appendReq(i)); err != nil {
				t.Fatal(err)
			}
		}
		list := func(req *auditv1.ListRequest) ([]int64, *pagev1.Page) {
			t.Helper()
			res, err := e.c.List(asReader(), req)
			if err != nil {
				t.Fatalf("List(%v): %v", req, err)
			}
			var seqs []int64
			for _, r := range res.GetRecords() {
				seqs = append(seqs, r.GetSeq())
			}
			return seqs, res.GetPage()
		}
		at := func(h int) *timestamppb.Timestamp { return timestamppb.New(day.Add(time.Duration(h) * time.Hour)) }
		next := int32(2)
		cases := []struct {
			name     string
			req      *auditv1.ListRequest
			want     []int64
			wantPage *pagev1.Page
		}{
			{"everything, newest first", &auditv1.ListRequest{}, []int64{6, 5, 4, 3, 2, 1}, &pagev1.Page{Limit: 50, Total: 6}},
			{"first page", &auditv1.ListRequest{Limit: 2}, []int64{6, 5}, &pagev1.Page{Limit: 2, Total: 6, NextOffset: &next}},
			{"last page", &auditv1.ListRequest{Offset: 4, Limit: 2}, []int64{2, 1}, &pagev1.Page{Offset: 4, Limit: 2, Total: 6}},
			{"by actor", &auditv1.ListRequest{Actor: "owner-1"}, []int64{5, 3, 1}, &pagev1.Page{Limit: 50, Total: 3}},
			{"by tool", &auditv1.ListRequest{Tool: "credits_grant"}, []int64{6, 4, 2}, &pagev1.Page{Limit: 50, Total: 3}},
			{"since is inclusive, until exclusive", &auditv1.ListRequest{Since: at(2), Until: at(5)}, []int64{4, 3, 2}, &pagev1.Page{Limit: 50, Total: 3}},
			{"all filters together", &auditv1.ListRequest{Actor: "owner-0", Tool: "credits_grant", Since: at(3)}, []int64{6, 4}, &pagev1.Page{Limit: 50, Total: 2}},
			{"unknown actor", &auditv1.ListRequest{Actor: "nobody"}, nil, &pagev1.Page{Limit: 50}},
		}
		for _, tc := range cases {
			got, page := list(tc.req)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: seqs (-want +got):\n%s", tc.name, diff)
			}
			if diff := cmp.Diff(tc.wantPage, page, protocmp.Transform()); diff != "" {
				t.Errorf("%s: page (-want +got):\n%s", tc.name, diff)
			}
		}
	})
}

func TestConcurrentAppendsNeverFork(t *testing.T) {
	const writers, each = 8, 10
	eachBackend(t, audit.Config{}, func(t *testing.T, e *env) {
		var wg sync.WaitGroup
		errs := make(chan error, writers*each)
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					if _, err := e.c.Append(asEdge(), appendReq(w*each+i)); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent append: %v", err)
		}
		res := verify(t, e, nil)
		if !res.GetIntact() || res.GetVerifiedRecords() != writers*each || res.GetHead().GetSeq() != writers*each {
			t.Fatalf("after %d concurrent appends verify = %v, want an intact chain of all of them", writers*each, res)
		}
		// One record per call, every predecessor used once: no fork.
		seen := map[string]bool{}
		calls := map[string]bool{}
		for off := int32(0); off < writers*each; off += 50 {
			page, err := e.c.List(asReader(), &auditv1.ListRequest{Offset: off, Limit: 50})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.GetRecords() {
				if seen[r.GetPrevHash()] {
					t.Errorf("two records follow %s: the chain forked", r.GetPrevHash())
				}
				seen[r.GetPrevHash()] = true
				calls[r.GetCallId()] = true
			}
		}
		if len(calls) != writers*each {
			t.Errorf("%d distinct calls recorded, want %d", len(calls), writers*each)
		}
	})
}

func TestServesREST(t *testing.T) {
	startEach(t, audit.Config{}, func(t *testing.T, e *env) {
		appendN(t, e, 3)
		get := func(path string) (int, string) {
			return e.srv.REST(t, servertest.Bearer("operator"), http.MethodGet, path, "")
		}
		if code, body := get("/v1/audit/records?tool=credits_grant&limit=10"); code != http.StatusOK || !strings.Contains(body, `"seq":"2"`) || strings.Contains(body, `"seq":"1"`) {
			t.Errorf("GET /v1/audit/records?tool=credits_grant = %d %s, want record 2 only", code, body)
		}
		if code, body := get("/v1/audit/head"); code != http.StatusOK || !strings.Contains(body, `"seq":"3"`) {
			t.Errorf("GET /v1/audit/head = %d %s, want seq 3", code, body)
		}
		if code, body := get("/v1/audit/verify"); code != http.StatusOK || !strings.Contains(body, `"intact":true`) {
			t.Errorf("GET /v1/audit/verify = %d %s, want intact", code, body)
		}
		if code, body := get("/v1/audit/verify?anchor.seq=2&anchor.hash=" + audit.GenesisHash); code != http.StatusOK || !strings.Contains(body, `"PROBLEM_ANCHOR_MISMATCH"`) {
			t.Errorf("GET /v1/audit/verify with a wrong anchor = %d %s, want an anchor mismatch", code, body)
		}
	})
}

// boundaryEvents counts the boundary.validation_failed events logged at the
// audit_chain boundary.
func boundaryEvents(log *logtest.Buffer) int {
	n := 0
	for _, ev := range log.Events("boundary.validation_failed") {
		if ev["boundary"] == "audit_chain" {
			n++
		}
	}
	return n
}
