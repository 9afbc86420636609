package edge_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.temporal.io/sdk/worker"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/workers/calls"
)

func TestAuditToolsThroughTheEdge(t *testing.T) {
	t.Parallel()
	svc := edgetest.StartAudit(t, 3)
	cs := edgetest.StartEdge(t, edge.Config{
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

	_, env := edgetest.Call(t, cs, "audit_list", map[string]any{"tool": "tasks_cancel", "limit": 2})
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
	_, env = edgetest.Call(t, cs, "audit_verify", map[string]any{})
	var v verifyData
	if err := json.Unmarshal(env.Data, &v); err != nil || env.Status != "ok" {
		t.Fatalf("audit_verify = %+v (%v)", env, err)
	}
	if !v.Intact || v.Head.Seq != "3" || v.FirstBad != nil {
		t.Errorf("audit_verify = %+v, want intact with head at record 3", v)
	}

	_, env = edgetest.Call(t, cs, "audit_verify", map[string]any{"anchor": map[string]any{"seq": "2", "hash": audit.GenesisHash}})
	v = verifyData{}
	if err := json.Unmarshal(env.Data, &v); err != nil || env.Status != "ok" {
		t.Fatalf("audit_verify with anchor = %+v (%v)", env, err)
	}
	if v.Intact || v.FirstBad == nil || v.FirstBad.Seq != "2" || v.FirstBad.Problem != "PROBLEM_ANCHOR_MISMATCH" {
		t.Errorf("audit_verify with a wrong anchor = %+v, want record 2: anchor mismatch", v)
	}

	if _, env := edgetest.Call(t, cs, "audit_list", map[string]any{"limit": 500}); env.DomainCode != "invalid_argument" {
		t.Errorf("audit_list with limit 500 = %+v, want invalid_argument", env)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "audit_append", Arguments: map[string]any{}}); err == nil && !res.IsError {
		t.Error("audit_append answered as a tool; it must not be callable through the edge")
	}
}

// TestAnElicitedAdminCallIsReportedAndRecordedWithItsReason: an ADMIN call
// whose confirmation and reason were asked from the user runs in the calls
// worker, which writes its audit record; the edge reports it executed once,
// with the reason the user gave and the call id the record holds.
func TestAnElicitedAdminCallIsReportedAndRecordedWithItsReason(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	auditSrv := edgetest.StartAudit(t, 0)
	acts, err := calls.NewActivities(calls.Config{
		Contracts:  edgetest.TestingContracts(),
		Services:   map[string]string{testingv1connect.TestingServiceName: m.Svc.URL, auditv1connect.AuditServiceName: auditSrv.URL},
		HTTPClient: m.Svc.Client(),
		Mesh:       servertest.MeshSigner(),
	})
	if err != nil {
		t.Fatal(err)
	}
	w := worker.New(m.Tc, m.Queue, worker.Options{})
	calls.Register(w, acts)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	m.Backend.SeedNotes("victim", 2)
	f := m.Edge(t, nil)
	a := edgetest.NewAnswerer(edgetest.PurgeSheet)
	cs := f.Connect(t, edge.ModernProtocol, "", &mcp.ClientOptions{ElicitationHandler: a.Handler})
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_purge", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res)); env.Status != "ok" {
		t.Fatalf("the purge = %+v, want it done", env)
	}

	events := f.Logs.Events("mcp.admin_op.executed")
	if len(events) != 1 {
		t.Fatalf("mcp.admin_op.executed events = %v, want exactly one", events)
	}
	ev := events[0]
	callID, _ := ev["call_id"].(string)
	if ev["tool"] != "testing_purge" || ev["reason"] != edgetest.PurgeSheet["reason"] || ev["subject"] != identity.DevSubject || ev["via"] != "elicitation" || callID == "" {
		t.Errorf("mcp.admin_op.executed = %v, want testing_purge by %s, with the reason the user gave and the call id", ev, identity.DevSubject)
	}
	list, err := auditv1connect.NewAuditServiceClient(auditSrv.Client(), auditSrv.URL, servertest.ClientOptions(nil)...).List(
		mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "owner", Agent: "owner", Roles: []string{mesh.RoleOwner}}}),
		&auditv1.ListRequest{Tool: "testing_purge"})
	if err != nil {
		t.Fatal(err)
	}
	if recs := list.GetRecords(); len(recs) != 1 || recs[0].GetCallId() != callID || recs[0].GetReason() != edgetest.PurgeSheet["reason"] || recs[0].GetActor() != identity.DevSubject {
		t.Errorf("audit records of testing_purge = %v, want one, under call id %q, with the reason, by %s", recs, callID, identity.DevSubject)
	}
}
