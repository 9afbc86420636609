package main

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/porttest"
)

// getStatus answers GET url's status code.
func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// TestProfilesOnlyWhenAsked: a service serves /debug/pprof on its listener,
// and the edge on its metrics address, with --pprof or TOOLMESH_PPROF, and
// neither does by default.
func TestProfilesOnlyWhenAsked(t *testing.T) {
	data := t.TempDir()
	if _, _, _, err := ensureMeshKeys(data); err != nil {
		t.Fatal(err)
	}
	pub := testPublicKey(t)
	plain, flagged, fromEnv := porttest.Addr(t), porttest.Addr(t), porttest.Addr(t)
	serve(t, nil, "tasks", "--addr", plain, "--data", t.TempDir(), "--mesh-public-key", pub)
	serve(t, nil, "tasks", "--addr", flagged, "--data", t.TempDir(), "--mesh-public-key", pub, "--pprof")
	serve(t, map[string]string{"TOOLMESH_PPROF": "true"}, "tasks", "--addr", fromEnv, "--data", t.TempDir(), "--mesh-public-key", pub)
	for addr, want := range map[string]int{plain: http.StatusNotFound, flagged: http.StatusOK, fromEnv: http.StatusOK} {
		if got := getStatus(t, "http://"+addr+"/debug/pprof/cmdline"); got != want {
			t.Errorf("service at %s: GET /debug/pprof/cmdline = %d, want %d", addr, got, want)
		}
	}

	edgeAddr, metricsAddr := porttest.Addr(t), porttest.Addr(t)
	startProcess(t, "http://"+edgeAddr+"/healthz", "edge", "--addr", edgeAddr, "--metrics-addr", metricsAddr, "--data", data,
		"--service", "tasks=http://"+flagged, "--pprof")
	if got := getStatus(t, "http://"+metricsAddr+"/debug/pprof/cmdline"); got != http.StatusOK {
		t.Errorf("edge metrics address: GET /debug/pprof/cmdline = %d, want 200", got)
	}
	if got := getStatus(t, "http://"+edgeAddr+"/debug/pprof/cmdline"); got != http.StatusNotFound {
		t.Errorf("edge MCP listener: GET /debug/pprof/cmdline = %d, want 404 (profiles stay off the public listener)", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := run(ctx, []string{"edge", "--addr", porttest.Addr(t), "--metrics-addr", "off", "--data", data, "--pprof"}, func(string) string { return "" }, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
		t.Errorf("edge --pprof --metrics-addr off: %v, want an error naming --metrics-addr", err)
	}
}

func TestUpPassesPprofToEveryProcess(t *testing.T) {
	plan, err := meshPlan(meshConfig{DataDir: "d", DevAgent: "local", EdgeAddr: "127.0.0.1:7100", Pprof: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plan {
		wants := p.Label != labelInfra
		if got := slices.Contains(p.Args, "--pprof"); got != wants {
			t.Errorf("%s: --pprof in its arguments = %v, want %v", p.Name, got, wants)
		}
	}
}
