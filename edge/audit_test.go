package edge_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// startAudit serves a real audit service on SQLite holding n records of
// tasks_cancel calls, appended the way the edge appends them.
func startAudit(t *testing.T, n int) *servertest.Server {
	t.Helper()
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "audit.db"))
	st, err := auditstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, audit.New(st, audit.Config{}).Registration())
	rec := audittrail.NewRecorder(auditv1connect.NewAuditServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...), audittrail.RecorderOptions{})
	for i := range n {
		if _, err := rec.Record(ctx, audittrail.Entry{
			CallID: "mcp-seed-" + string(rune('a'+i)), Actor: "local", Tool: "tasks_cancel", Reason: "cleanup",
			Arguments: &tasksv1.CancelRequest{TaskId: "tsk_00000000000000000000000000"},
		}); err != nil {
			t.Fatal(err)
		}
	}
	return srv
}

func TestAuditToolsThroughTheEdge(t *testing.T) {
	t.Parallel()
	svc := startAudit(t, 3)
	cs := startEdge(t, edge.Config{
		Services:    map[string]string{auditv1connect.AuditServiceName: svc.URL},
		CallTimeout: 5 * time.Second,
		HTTPClient:  svc.Client(),
	})

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
	}
	if !names["audit_list"] || !names["audit_verify"] || names["audit_append"] {
		t.Errorf("tools/list has audit_list %v, audit_verify %v, audit_append %v; want list and verify only (append is internal)",
			names["audit_list"], names["audit_verify"], names["audit_append"])
	}

	_, env := call(t, cs, "audit_list", map[string]any{"tool": "tasks_cancel", "limit": 2})
	var list struct {
		Records []struct {
			Seq, Tool, Actor string
		} `json:"records"`
	}
	if err := json.Unmarshal(env.Data, &list); err != nil || env.Status != "ok" {
		t.Fatalf("audit_list = %+v (%v)", env, err)
	}
	if len(list.Records) != 2 || list.Records[0].Seq != "3" || list.Records[1].Seq != "2" || list.Records[0].Tool != "tasks_cancel" {
		t.Errorf("audit_list records = %+v, want records 3 and 2 of tasks_cancel", list.Records)
	}
	if p := env.Pagination; p == nil || p.Total != 3 || p.Limit != 2 || p.NextOffset == nil || *p.NextOffset != 2 {
		t.Errorf("audit_list pagination = %+v, want total 3, limit 2, next_offset 2", p)
	}

	type verifyData struct {
		Intact bool `json:"intact"`
		Head   struct {
			Seq, Hash string
		} `json:"head"`
		FirstBad *struct {
			Seq, Problem, Detail string
		} `json:"first_bad"`
	}
	_, env = call(t, cs, "audit_verify", map[string]any{})
	var v verifyData
	if err := json.Unmarshal(env.Data, &v); err != nil || env.Status != "ok" {
		t.Fatalf("audit_verify = %+v (%v)", env, err)
	}
	if !v.Intact || v.Head.Seq != "3" || v.FirstBad != nil {
		t.Errorf("audit_verify = %+v, want intact with head at record 3", v)
	}

	_, env = call(t, cs, "audit_verify", map[string]any{"anchor": map[string]any{"seq": "2", "hash": audit.GenesisHash}})
	v = verifyData{}
	if err := json.Unmarshal(env.Data, &v); err != nil || env.Status != "ok" {
		t.Fatalf("audit_verify with anchor = %+v (%v)", env, err)
	}
	if v.Intact || v.FirstBad == nil || v.FirstBad.Seq != "2" || v.FirstBad.Problem != "PROBLEM_ANCHOR_MISMATCH" {
		t.Errorf("audit_verify with a wrong anchor = %+v, want record 2: anchor mismatch", v)
	}

	if _, env := call(t, cs, "audit_list", map[string]any{"limit": 500}); env.DomainCode != "invalid_argument" {
		t.Errorf("audit_list with limit 500 = %+v, want invalid_argument", env)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "audit_append", Arguments: map[string]any{}}); err == nil && !res.IsError {
		t.Error("audit_append answered as a tool; it must not be callable through the edge")
	}
}
