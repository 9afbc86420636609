package memory_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	memoryv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	"github.com/toolmesh/toolmesh/services/memory"
	"github.com/toolmesh/toolmesh/services/memory/memorystore"
)

// testKey returns a 32-byte key derived from name.
func testKey(name string) []byte {
	k := sha256.Sum256([]byte("memory test key " + name))
	return k[:]
}

// mode is one way the service stores content.
type mode struct {
	name string
	key  []byte
}

var modes = []mode{{"plaintext", nil}, {"encrypted", testKey("a")}}

// env is a memory service on one SQLite file.
type env struct {
	path string
	db   *sqldb.DB
	srv  *servertest.Server
	logs *logtest.Buffer
}

func openDB(t *testing.T, path string) (*sqldb.DB, *memorystore.Store) {
	t.Helper()
	db := sqldbtest.Open(t, path)
	st, err := memorystore.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return db, st
}

// start serves the memory service on the SQLite file at path (a new one in
// a temporary directory when empty).
func start(t *testing.T, path string, cfg memory.Config) *env {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "memory.db")
	}
	db, st := openDB(t, path)
	e := &env{path: path, db: db, logs: &logtest.Buffer{}}
	log := logging.New(e.logs, slog.LevelDebug)
	cfg.Log = log
	svc, err := memory.New(context.Background(), st, cfg)
	if err != nil {
		db.Close()
		t.Fatalf("memory.New: %v", err)
	}
	e.srv = servertest.StartWith(t, servertest.Options{Log: log}, svc.Registration())
	t.Cleanup(func() { e.close() })
	return e
}

// serve returns a start function that serves the memory service with cfg
// on a new SQLite file.
func serve(cfg memory.Config) func(t *testing.T) *servertest.Server {
	return func(t *testing.T) *servertest.Server { return start(t, "", cfg).srv }
}

func (e *env) close() {
	e.srv.Stop()
	e.db.Close()
}

func (e *env) client(p servertest.Protocol) memoryv1connect.MemoryServiceClient {
	return memoryv1connect.NewMemoryServiceClient(e.srv.Client(), e.srv.URL, servertest.ClientOptions(p.Opts)...)
}

// eachProtocolAndMode runs fn against a fresh server over Connect and gRPC,
// with and without encryption.
func eachProtocolAndMode(t *testing.T, cfg memory.Config, fn func(t *testing.T, c memoryv1connect.MemoryServiceClient)) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			cfg := cfg
			cfg.Key = m.key
			servertest.EachProtocol(t, serve(cfg), memoryv1connect.NewMemoryServiceClient, fn)
		})
	}
}

func save(t *testing.T, c memoryv1connect.MemoryServiceClient, ctx context.Context, key, content string) *memoryv1.SaveResponse {
	t.Helper()
	res, err := c.Save(ctx, &memoryv1.SaveRequest{Key: key, Content: content})
	if err != nil {
		t.Fatalf("Save %s: %v", key, err)
	}
	return res
}

func recallKeys(t *testing.T, c memoryv1connect.MemoryServiceClient, ctx context.Context, query string, limit int32) []string {
	t.Helper()
	res, err := c.Recall(ctx, &memoryv1.RecallRequest{Query: query, Limit: limit})
	if err != nil {
		t.Fatalf("Recall %q: %v", query, err)
	}
	keys := []string{}
	for i, m := range res.GetMatches() {
		keys = append(keys, m.GetMemory().GetKey())
		if i > 0 && m.GetScore() > res.GetMatches()[i-1].GetScore() {
			t.Errorf("Recall %q: match %d scores %v, above the match before it (%v)", query, i, m.GetScore(), res.GetMatches()[i-1].GetScore())
		}
	}
	return keys
}

func TestSaveUpsertsByAgentAndKey(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	now := t0
	eachProtocolAndMode(t, memory.Config{Now: func() time.Time { return now }}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		now = t0
		ctx := servertest.As(context.Background(), "agent-a")
		first := save(t, c, ctx, "user.timezone", "The user lives in Lisbon (WET).")
		if !first.GetCreated() {
			t.Error("first save of a key: created = false, want true")
		}
		now = t0.Add(time.Hour)
		second := save(t, c, ctx, "user.timezone", "The user moved to Tokyo (JST).")
		if second.GetCreated() {
			t.Error("second save of the same key: created = true, want false (an upsert)")
		}
		want := &memoryv1.Memory{Key: "user.timezone", Content: "The user moved to Tokyo (JST).",
			CreateTime: first.GetMemory().GetCreateTime(), UpdateTime: second.GetMemory().GetUpdateTime()}
		if diff := cmp.Diff(want, second.GetMemory(), protocmp.Transform()); diff != "" {
			t.Errorf("upserted memory (-want +got):\n%s", diff)
		}
		if !second.GetMemory().GetUpdateTime().AsTime().Equal(now) {
			t.Errorf("update_time = %v, want the time of the second save %v", second.GetMemory().GetUpdateTime().AsTime(), now)
		}

		list, err := c.List(ctx, &memoryv1.ListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]*memoryv1.Memory{want}, list.GetMemories(), protocmp.Transform()); diff != "" {
			t.Errorf("after two saves of one key, List (-want +got):\n%s", diff)
		}
		if got := recallKeys(t, c, ctx, "Lisbon", 0); len(got) != 0 {
			t.Errorf("recall of the replaced content's word found %v, want nothing: the index must follow the upsert", got)
		}
		if got := recallKeys(t, c, ctx, "tokyo", 0); !cmp.Equal(got, []string{"user.timezone"}) {
			t.Errorf("recall of the new content = %v, want [user.timezone]", got)
		}

		// The same key belongs to each agent separately.
		other := servertest.As(context.Background(), "agent-b")
		if !save(t, c, other, "user.timezone", "Agent b's user is in Lima.").GetCreated() {
			t.Error("another agent's first save of the same key: created = false, want true")
		}
		if got := recallKeys(t, c, ctx, "lima", 0); len(got) != 0 {
			t.Errorf("agent-a recalls agent-b's memory: %v", got)
		}
		if got := recallKeys(t, c, other, "tokyo", 0); len(got) != 0 {
			t.Errorf("agent-b recalls agent-a's memory: %v", got)
		}
		res, err := c.List(other, &memoryv1.ListRequest{})
		if err != nil || res.GetPage().GetTotal() != 1 || res.GetMemories()[0].GetContent() != "Agent b's user is in Lima." {
			t.Errorf("agent-b's List = %v (err %v), want only its own memory", res.GetMemories(), err)
		}
	})
}

func TestRecallRanksBestMatchFirst(t *testing.T) {
	eachProtocolAndMode(t, memory.Config{}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		for k, v := range map[string]string{
			"both":      "Deploy to staging with the deploy script.",
			"staging":   "The staging cluster is blue.",
			"deploy":    "Deploy notes.",
			"unrelated": "Lunch menu for Friday.",
			"derived":   "Deployment and stagings are different words.",
			"apple3":    "apple apple apple pie",
			"apple1":    "apple tart with cream",
		} {
			save(t, c, ctx, k, v)
		}

		got := recallKeys(t, c, ctx, "deploy staging", 0)
		if len(got) != 3 || got[0] != "both" {
			t.Fatalf("recall 'deploy staging' = %v, want 'both' (has both words) first, then 'staging' and 'deploy'", got)
		}
		if rest := []string{got[1], got[2]}; !cmp.Equal(rest, []string{"deploy", "staging"}) && !cmp.Equal(rest, []string{"staging", "deploy"}) {
			t.Errorf("recall 'deploy staging' = %v, want 'staging' and 'deploy' after 'both'", got)
		}
		if got := recallKeys(t, c, ctx, "apple", 0); !cmp.Equal(got, []string{"apple3", "apple1"}) {
			t.Errorf("recall 'apple' = %v, want [apple3 apple1]: more occurrences rank higher", got)
		}
		got = recallKeys(t, c, ctx, "DEPLOY, please!", 0)
		sort.Strings(got)
		if !cmp.Equal(got, []string{"both", "deploy"}) {
			t.Errorf("recall 'DEPLOY, please!' = %v, want both and deploy: case and punctuation are ignored", got)
		}
		if got := recallKeys(t, c, ctx, "deployments", 0); len(got) != 0 {
			t.Errorf("recall 'deployments' = %v, want nothing: matching is on whole words", got)
		}
		if got := recallKeys(t, c, ctx, "?!", 0); len(got) != 0 {
			t.Errorf("recall of punctuation only = %v, want no matches", got)
		}

		res, err := c.Recall(ctx, &memoryv1.RecallRequest{Query: "friday"})
		if err != nil || len(res.GetMatches()) != 1 || res.GetMatches()[0].GetMemory().GetContent() != "Lunch menu for Friday." {
			t.Errorf("recall 'friday' = %v (err %v), want the lunch memory with its content", res.GetMatches(), err)
		}
	})
}

func TestRecallLimit(t *testing.T) {
	eachProtocolAndMode(t, memory.Config{}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		for i := range 12 {
			save(t, c, ctx, fmt.Sprintf("note-%02d", i), "a note about rust")
		}
		if got := recallKeys(t, c, ctx, "rust", 0); len(got) != memory.DefaultRecallLimit {
			t.Errorf("recall without limit returned %d matches, want the default %d", len(got), memory.DefaultRecallLimit)
		}
		if got := recallKeys(t, c, ctx, "rust", 3); len(got) != 3 {
			t.Errorf("recall with limit 3 returned %d matches", len(got))
		}
	})
}

func TestListPaginatesMostRecentFirst(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	now := t0
	eachProtocolAndMode(t, memory.Config{Now: func() time.Time { return now }}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		for i := range 5 {
			now = t0.Add(time.Duration(i) * time.Minute)
			save(t, c, ctx, fmt.Sprintf("k%d", i), fmt.Sprintf("content %d", i))
		}
		now = t0.Add(time.Hour)
		save(t, c, ctx, "k1", "k1 saved again") // moves to the front

		page1, err := c.List(ctx, &memoryv1.ListRequest{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		next := int32(2)
		if diff := cmp.Diff(&pagev1.Page{Offset: 0, Limit: 2, Total: 5, NextOffset: &next}, page1.GetPage(), protocmp.Transform()); diff != "" {
			t.Errorf("first page (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"k1", "k4"}, keys(page1.GetMemories())); diff != "" {
			t.Errorf("first page is not the two most recently saved (-want +got):\n%s", diff)
		}
		last, err := c.List(ctx, &memoryv1.ListRequest{Offset: 4, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"k0"}, keys(last.GetMemories())); diff != "" || last.GetPage().NextOffset != nil {
			t.Errorf("last page = %v with next_offset %v, want [k0] and no next page", keys(last.GetMemories()), last.GetPage().NextOffset)
		}
		all, err := c.List(ctx, &memoryv1.ListRequest{})
		if err != nil || all.GetPage().GetLimit() != 50 || len(all.GetMemories()) != 5 {
			t.Errorf("default List: limit %d with %d memories (err %v), want limit 50 with 5", all.GetPage().GetLimit(), len(all.GetMemories()), err)
		}
	})
}

func keys(ms []*memoryv1.Memory) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.GetKey()
	}
	return out
}

func TestGetByKey(t *testing.T) {
	eachProtocolAndMode(t, memory.Config{}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		saved := save(t, c, ctx, "project/roadmap", "Ship the zeppelin feature in June.").GetMemory()
		res, err := c.Get(ctx, &memoryv1.GetRequest{Key: "project/roadmap"})
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if diff := cmp.Diff(saved, res.GetMemory(), protocmp.Transform()); diff != "" {
			t.Errorf("Get (-saved +got):\n%s", diff)
		}
		_, err = c.Get(servertest.As(context.Background(), "agent-b"), &memoryv1.GetRequest{Key: "project/roadmap"})
		if servertest.Code(t, err) != connect.CodeNotFound || !strings.Contains(err.Error(), `"project/roadmap"`) {
			t.Errorf("another agent's Get: %v, want not_found naming the key", err)
		}
		if _, err := c.Get(ctx, &memoryv1.GetRequest{Key: "-bad"}); servertest.Code(t, err) != connect.CodeInvalidArgument {
			t.Errorf("Get with a malformed key: %v, want invalid_argument", err)
		}
	})
}

func TestDelete(t *testing.T) {
	eachProtocolAndMode(t, memory.Config{}, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		save(t, c, ctx, "project/roadmap", "Ship the zeppelin feature in June.")
		save(t, c, ctx, "other", "Keep the zeppelin hangar tidy.")
		if _, err := c.Delete(servertest.As(context.Background(), "agent-b"), &memoryv1.DeleteRequest{Key: "project/roadmap"}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("another agent's delete: code %v, want not_found", connect.CodeOf(err))
		}
		res, err := c.Delete(ctx, &memoryv1.DeleteRequest{Key: "project/roadmap"})
		if err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if res.GetMemory().GetContent() != "Ship the zeppelin feature in June." {
			t.Errorf("Delete returned %v, want the deleted memory with its content", res.GetMemory())
		}
		if got := recallKeys(t, c, ctx, "zeppelin", 0); !cmp.Equal(got, []string{"other"}) {
			t.Errorf("after delete, recall 'zeppelin' = %v, want [other]", got)
		}
		list, err := c.List(ctx, &memoryv1.ListRequest{})
		if err != nil || !cmp.Equal(keys(list.GetMemories()), []string{"other"}) {
			t.Errorf("after delete, List = %v (err %v), want [other]", keys(list.GetMemories()), err)
		}
		_, err = c.Delete(ctx, &memoryv1.DeleteRequest{Key: "project/roadmap"})
		if servertest.Code(t, err) != connect.CodeNotFound || !strings.Contains(err.Error(), `"project/roadmap"`) {
			t.Errorf("second delete: %v, want not_found naming the key", err)
		}
		// A deleted key can be saved again as new.
		if !save(t, c, ctx, "project/roadmap", "again").GetCreated() {
			t.Error("save after delete: created = false, want true")
		}
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	servertest.EachProtocol(t, serve(memory.Config{}), memoryv1connect.NewMemoryServiceClient, func(t *testing.T, c memoryv1connect.MemoryServiceClient) {
		ctx := servertest.As(context.Background(), "agent-a")
		cases := []struct {
			name string
			call func() error
			want map[string][]string
		}{
			{"no key", func() error {
				_, err := c.Save(ctx, &memoryv1.SaveRequest{Content: "x"})
				return err
			}, map[string][]string{"key": {"required"}}},
			{"key with a space", func() error {
				_, err := c.Save(ctx, &memoryv1.SaveRequest{Key: "my key", Content: "x"})
				return err
			}, map[string][]string{"key": {"string.pattern"}}},
			{"blank content", func() error {
				_, err := c.Save(ctx, &memoryv1.SaveRequest{Key: "k", Content: "  \n  "})
				return err
			}, map[string][]string{"content": {"string.non_blank"}}},
			{"blank query", func() error {
				_, err := c.Recall(ctx, &memoryv1.RecallRequest{Query: "\t"})
				return err
			}, map[string][]string{"query": {"string.non_blank"}}},
			{"too long content", func() error {
				_, err := c.Save(ctx, &memoryv1.SaveRequest{Key: "k", Content: strings.Repeat("x", 16001)})
				return err
			}, map[string][]string{"content": {"string.max_len"}}},
			{"empty query", func() error {
				_, err := c.Recall(ctx, &memoryv1.RecallRequest{})
				return err
			}, map[string][]string{"query": {"required"}}},
			{"recall limit over the bound", func() error {
				_, err := c.Recall(ctx, &memoryv1.RecallRequest{Query: "x", Limit: 51})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"list limit over the bound", func() error {
				_, err := c.List(ctx, &memoryv1.ListRequest{Limit: 201})
				return err
			}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"delete without key", func() error {
				_, err := c.Delete(ctx, &memoryv1.DeleteRequest{})
				return err
			}, map[string][]string{"key": {"required"}}},
		}
		for _, tc := range cases {
			if diff := cmp.Diff(tc.want, servertest.Violations(t, tc.call())); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		if res, err := c.List(ctx, &memoryv1.ListRequest{}); err != nil || res.GetPage().GetTotal() != 0 {
			t.Errorf("rejected requests stored something: %d memories (err %v)", res.GetPage().GetTotal(), err)
		}
	})
}

func TestCallWithoutIdentityIsUnauthenticated(t *testing.T) {
	c := start(t, "", memory.Config{}).client(servertest.Protocols()[0])
	_, err := c.Save(context.Background(), &memoryv1.SaveRequest{Key: "k", Content: "x"})
	if servertest.Code(t, err) != connect.CodeUnauthenticated {
		t.Errorf("code %v, want unauthenticated", connect.CodeOf(err))
	}
}

func TestREST(t *testing.T) {
	e := start(t, "", memory.Config{Key: testKey("rest")})
	do := func(method, path, body string) (int, string) {
		t.Helper()
		return e.srv.REST(t, servertest.Bearer("agent-rest"), method, path, body)
	}
	if code, out := do(http.MethodPost, "/v1/memories", `{"key":"ops/oncall","content":"Pager rotation starts Monday"}`); code != http.StatusOK || !strings.Contains(out, `"created":true`) {
		t.Errorf("POST /v1/memories = %d %s, want 200 with created", code, out)
	}
	if code, out := do(http.MethodGet, "/v1/memories:recall?query="+url.QueryEscape("pager"), ""); code != http.StatusOK || !strings.Contains(out, "Pager rotation starts Monday") {
		t.Errorf("GET /v1/memories:recall = %d %s, want the memory", code, out)
	}
	if code, out := do(http.MethodGet, "/v1/memories:get?key="+url.QueryEscape("ops/oncall"), ""); code != http.StatusOK || !strings.Contains(out, "Pager rotation starts Monday") {
		t.Errorf("GET /v1/memories:get = %d %s, want the memory", code, out)
	}
	if code, out := do(http.MethodDelete, "/v1/memories?key="+url.QueryEscape("ops/oncall"), ""); code != http.StatusOK || !strings.Contains(out, `"key":"ops/oncall"`) {
		t.Errorf("DELETE /v1/memories = %d %s, want the deleted memory", code, out)
	}
}
