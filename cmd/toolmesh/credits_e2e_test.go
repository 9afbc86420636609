package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/servertest"
	"github.com/toolmesh/toolmesh/internal/sqldbtest"
	creditsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/credits/v1/creditsv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
	"github.com/toolmesh/toolmesh/services/credits"
	"github.com/toolmesh/toolmesh/services/credits/creditsstore"
)

func TestCreditsToolsThroughTheEdge(t *testing.T) {
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "credits.db"))
	st, err := creditsstore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, credits.New(st, credits.Config{}).Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	e, s := connectEdge(t, edge.Config{
		Services:   map[string]string{creditsv1connect.CreditsServiceName: srv.URL},
		DevAgent:   "agent-e2e",
		HTTPClient: edgeClient,
	})

	// The whole credits tool surface, whoever the caller is. Spend is an
	// RPC for services, not a tool.
	want := map[string]struct {
		kind       toolv1.Kind
		privileged bool
	}{
		"credits_balance":    {toolv1.Kind_KIND_READ, false},
		"credits_ledger":     {toolv1.Kind_KIND_READ, false},
		"credits_grant":      {toolv1.Kind_KIND_ADMIN, true},
		"credits_config_get": {toolv1.Kind_KIND_ADMIN, true},
		"credits_config_set": {toolv1.Kind_KIND_ADMIN, true},
	}
	for name, w := range want {
		tool, ok := e.Registry().Lookup(name)
		if !ok {
			t.Errorf("the edge has no tool %s", name)
			continue
		}
		if tool.Kind != w.kind || tool.Privileged != w.privileged {
			t.Errorf("%s: kind %v privileged %v, want %v %v", name, tool.Kind, tool.Privileged, w.kind, w.privileged)
		}
	}
	for _, tool := range e.Registry().Tools() {
		if tool.Method.FullName() == "toolmesh.credits.v1.CreditsService.Spend" {
			t.Errorf("Spend is exposed as tool %s; it is for services only", tool.Name)
		}
	}
	// Tools any agent may call are listed.
	tools := listTools(t, s)
	for _, name := range []string{"credits_balance", "credits_ledger"} {
		if tool, ok := tools[name]; !ok || !tool.Annotations.ReadOnlyHint {
			t.Errorf("tools/list: %s missing or not read-only", name)
		}
	}

	// Credits granted and spent over the service API show through the tools.
	c := creditsv1connect.NewCreditsServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(nil)...)
	if _, err := c.Grant(servertest.As(ctx, "ops"), &creditsv1.GrantRequest{Wallet: "agent-e2e", Amount: 120, Reference: "inv-e2e"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Spend(servertest.As(ctx, "agent-e2e"), &creditsv1.SpendRequest{Amount: 20, Reference: "job-e2e"}); err != nil {
		t.Fatal(err)
	}
	var bal struct {
		Wallet  string
		Balance string // int64 travels as a JSON string
		Low     bool
	}
	okData(t, callTool(t, s, "credits_balance", map[string]any{}), &bal)
	if bal.Wallet != "agent-e2e" || bal.Balance != "100" || bal.Low {
		t.Errorf("credits_balance data = %+v, want agent-e2e holding \"100\", not low", bal)
	}
	ledger := callTool(t, s, "credits_ledger", map[string]any{"limit": 1})
	var entries struct {
		Entries []struct{ Reference, Amount string }
	}
	okData(t, ledger, &entries)
	if len(entries.Entries) != 1 || entries.Entries[0].Reference != "job-e2e" || entries.Entries[0].Amount != "-20" ||
		ledger.Pagination == nil || ledger.Pagination.Total != 2 {
		t.Errorf("credits_ledger = %+v with pagination %+v, want the newest entry (the spend) and total 2", entries, ledger.Pagination)
	}
	other := callTool(t, s, "credits_balance", map[string]any{"wallet": "someone-else"})
	if other.Status != "error" || other.DomainCode != "permission_denied" {
		t.Errorf("credits_balance of another wallet = %+v, want permission_denied", other)
	}
}
