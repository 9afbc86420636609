package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/server"
)

// TestShutdownReportsNotServingBeforeClosing checks the drain sequence that
// lets load balancers and probes stop sending traffic before the listener
// closes.
func TestShutdownReportsNotServingBeforeClosing(t *testing.T) {
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, lis, logging.Discard(), server.Options{DrainDelay: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	base := "http://" + srv.Addr()
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: protocols}}
	health := grpchealth.NewClient(h2c, base, connect.WithGRPC())

	waitFor(t, func() bool {
		res, err := health.Check(context.Background(), &grpchealth.CheckRequest{})
		return err == nil && res.Status == grpchealth.StatusServing
	}, "health SERVING after start")
	if code := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d while serving, want 200", code)
	}

	cancel()
	waitFor(t, func() bool { return get(t, base+"/healthz") == http.StatusServiceUnavailable }, "/healthz 503 while draining")
	res, err := health.Check(context.Background(), &grpchealth.CheckRequest{})
	if err != nil || res.Status != grpchealth.StatusNotServing {
		t.Errorf("health while draining = %v (err %v), want NOT_SERVING", res, err)
	}
	h2c.CloseIdleConnections()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v, want a clean shutdown", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("the listener still answers after shutdown")
	}
}

func get(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
