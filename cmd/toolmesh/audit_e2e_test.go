package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/audittrail"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	agentsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/agents/v1/agentsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	"github.com/toolmesh/toolmesh/services/audit"
	"github.com/toolmesh/toolmesh/services/audit/auditstore"
)

// TestAdminCallsLeaveExactlyOneAuditRecord drives ADMIN tools through the
// edge, as under `toolmesh up`, and reads the audit trail back: one record
// per successful admin call, none for refused or failed ones.
func TestAdminCallsLeaveExactlyOneAuditRecord(t *testing.T) {
	agentsSrv, checked := startDirectory(t)
	aust, err := auditstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "audit.db")))
	if err != nil {
		t.Fatal(err)
	}
	auditSrv := checked(audit.New(aust, audit.Config{}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services: map[string]string{
			agentsv1connect.AgentsServiceName: agentsSrv.URL,
			auditv1connect.AuditServiceName:   auditSrv.URL,
		},
		HTTPClient: edgeClient,
	})

	type record struct {
		Tool       string `json:"tool"`
		Actor      string `json:"actor"`
		Reason     string `json:"reason"`
		ArgsDigest string `json:"args_digest"`
		CallID     string `json:"call_id"`
	}
	records := func() []record {
		t.Helper()
		env := callTool(t, s, "audit_list", map[string]any{})
		if env.Status != "ok" {
			t.Fatalf("audit_list = %+v", env)
		}
		var data struct {
			Records []record `json:"records"`
		}
		if err := json.Unmarshal(env.Data, &data); err != nil {
			t.Fatal(err)
		}
		return data.Records
	}

	register := map[string]any{"agent_id": "research-bot", "display_name": "Research", "confirm": true, "reason": "onboard the research bot"}
	if env := callTool(t, s, "agents_register", register); env.Status != "ok" {
		t.Fatalf("agents_register = %+v, want ok", env)
	}
	got := records()
	if len(got) != 1 {
		t.Fatalf("after one admin call the trail has %d records, want 1: %+v", len(got), got)
	}
	want, err := audittrail.ArgumentsDigest(&agentsv1.RegisterRequest{AgentId: "research-bot", DisplayName: "Research"})
	if err != nil {
		t.Fatal(err)
	}
	r := got[0]
	if r.Tool != "agents_register" || r.Actor == "" || r.Reason != "onboard the research bot" || r.ArgsDigest != want || r.CallID == "" {
		t.Errorf("record = %+v, want agents_register by the caller with its reason and digest %s", r, want)
	}

	refused := []map[string]any{
		{"agent_id": "other-bot"},                                        // no confirm, no reason
		{"agent_id": "other-bot", "confirm": "true", "reason": "x"},      // confirm not the JSON literal true
		{"agent_id": "other-bot", "confirm": true, "reason": "  "},       // blank reason
		{"agent_id": "research-bot", "confirm": true, "reason": "again"}, // conflict in the service
		{"agent_id": "Not Valid", "confirm": true, "reason": "bad id"},   // invalid argument
	}
	for _, args := range refused {
		if env := callTool(t, s, "agents_register", args); env.Status == "ok" {
			t.Fatalf("agents_register %v succeeded, want a refusal", args)
		}
	}
	if got := records(); len(got) != 1 {
		t.Fatalf("refused admin calls left records: %+v", got)
	}

	if env := callTool(t, s, "agents_set_status", map[string]any{"agent_id": "research-bot", "status": "AGENT_STATUS_PAUSED", "confirm": true, "reason": "maintenance"}); env.Status != "ok" {
		t.Fatalf("agents_set_status = %+v, want ok", env)
	}
	got = records()
	if len(got) != 2 || got[0].Tool != "agents_set_status" || got[0].Reason != "maintenance" {
		t.Errorf("after a second admin call: %+v, want agents_set_status newest of 2", got)
	}
	if env := callTool(t, s, "audit_verify", map[string]any{}); env.Status != "ok" || !json.Valid(env.Data) || string(env.Data) == "" {
		t.Fatalf("audit_verify = %+v", env)
	} else {
		var v struct {
			Intact bool `json:"intact"`
		}
		_ = json.Unmarshal(env.Data, &v)
		if !v.Intact {
			t.Errorf("audit_verify = %s, want an intact chain", env.Data)
		}
	}
}
