package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/memory/v1/memoryv1connect"
	"github.com/toolmesh/toolmesh/services/memory"
	"github.com/toolmesh/toolmesh/services/memory/memorystore"
)

// okData decodes the data of an ok envelope into v.
func okData(t *testing.T, env envelope, v any) {
	t.Helper()
	if env.Status != "ok" {
		t.Fatalf("envelope status %q (%s: %s), want ok", env.Status, env.DomainCode, env.Message)
	}
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("decode envelope data %s: %v", env.Data, err)
	}
}

func TestMemoryToolsThroughTheEdge(t *testing.T) {
	ctx := context.Background()
	db := sqldbtest.Open(t, filepath.Join(t.TempDir(), "memory.db"))
	st, err := memorystore.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	key, err := memory.ParseKey("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := memory.New(ctx, st, memory.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, svc.Registration())
	edgeClient := servertest.HTTPClient()
	t.Cleanup(edgeClient.CloseIdleConnections)
	_, s := connectEdge(t, edge.Config{
		Services:   map[string]string{memoryv1connect.MemoryServiceName: srv.URL},
		DevAgent:   "local",
		HTTPClient: edgeClient,
	})

	tools := listTools(t, s)
	for name, readOnly := range map[string]bool{"memory_save": false, "memory_recall": true, "memory_list": true, "memory_delete": false} {
		tool, ok := tools[name]
		if !ok {
			t.Errorf("tools/list lacks %s", name)
			continue
		}
		if tool.Description == "" || tool.Annotations == nil || tool.Annotations.ReadOnlyHint != readOnly {
			t.Errorf("%s: description %q, annotations %+v; want a description and readOnlyHint %v", name, tool.Description, tool.Annotations, readOnly)
		}
	}

	var saved struct {
		Memory  struct{ Key, Content string }
		Created bool
	}
	okData(t, callTool(t, s, "memory_save", map[string]any{"key": "deploy/checklist", "content": "Run migrations before the blue-green switch."}), &saved)
	if !saved.Created || saved.Memory.Key != "deploy/checklist" {
		t.Errorf("memory_save data = %+v, want the created memory", saved)
	}
	okData(t, callTool(t, s, "memory_save", map[string]any{"key": "lunch", "content": "Friday lunch is pizza."}), &saved)

	var recalled struct {
		Matches []struct {
			Memory struct{ Key, Content string }
			Score  float64
		}
	}
	okData(t, callTool(t, s, "memory_recall", map[string]any{"query": "migrations switch", "limit": 5}), &recalled)
	if len(recalled.Matches) != 1 || recalled.Matches[0].Memory.Content != "Run migrations before the blue-green switch." {
		t.Errorf("memory_recall data = %+v, want the deploy checklist only", recalled)
	}

	list := callTool(t, s, "memory_list", map[string]any{"limit": 1})
	if list.Status != "ok" || list.Pagination == nil || list.Pagination.Total != 2 || list.Pagination.NextOffset == nil {
		t.Errorf("memory_list envelope = %+v, want ok with pagination total 2 and a next page", list)
	}

	bad := callTool(t, s, "memory_save", map[string]any{"key": "has a space", "content": "x"})
	if bad.Status != "error" || bad.DomainCode != "invalid_argument" || len(bad.Violations) != 1 || bad.Violations[0].Field != "key" {
		t.Errorf("memory_save with a bad key = %+v, want invalid_argument naming key", bad)
	}
	if gone := callTool(t, s, "memory_delete", map[string]any{"key": "nope"}); gone.Status != "error" || gone.DomainCode != "not_found" {
		t.Errorf("memory_delete of a missing key = %+v, want not_found", gone)
	}
}
