package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
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
	srv, err := server.New(ctx, lis, logging.Discard(), server.Options{DrainDelay: 500 * time.Millisecond, Mesh: testVerifier(t)})
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

func testVerifier(t *testing.T) *mesh.Verifier {
	t.Helper()
	key, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := mesh.NewSigner(key, "test")
	if err != nil {
		t.Fatal(err)
	}
	return s.Verifier()
}

// start runs the test service behind a real listener and returns its base
// URL and the signer whose tokens it accepts.
func start(t *testing.T, logs io.Writer) (string, *mesh.Signer) {
	t.Helper()
	key, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := mesh.NewSigner(key, "test")
	if err != nil {
		t.Fatal(err)
	}
	return "http://" + serveTesting(t, logging.New(logs, slog.LevelDebug), server.Options{Mesh: signer.Verifier()}), signer
}

// serveTesting serves the test service (and its notes service) with opts
// until the test ends and returns its host:port.
func serveTesting(t *testing.T, log *slog.Logger, opts server.Options) string {
	t.Helper()
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	opts.ShutdownTimeout = 5 * time.Second
	svc := testingsvc.New()
	srv, err := server.New(ctx, lis, log, opts, svc.Server(), svc.NotesServer())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return srv.Addr()
}

func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}}
}

func TestIdentityReachesHandlerOverEveryProtocol(t *testing.T) {
	base, signer := start(t, io.Discard)
	call := mesh.Call{Caller: mesh.Caller{Subject: "user-1", Agent: "a1", Roles: []string{mesh.RoleOwner}, Depth: 1}, IdempotencyKey: "k-1"}
	want := &testingv1.EchoResponse{Message: "hi", AgentId: "a1", Subject: "user-1", Roles: []string{"owner"}, Depth: 1, IdempotencyKey: "k-1"}
	for name, opts := range map[string][]connect.ClientOption{
		"connect": nil,
		"grpc":    {connect.WithGRPC()},
	} {
		t.Run(name, func(t *testing.T) {
			opts := append(opts, connect.WithInterceptors(mesh.NewClientInterceptor(signer, time.Minute)))
			client := testingv1connect.NewTestingServiceClient(h2cClient(), base, opts...)
			got, err := client.Echo(mesh.WithCall(context.Background(), call), &testingv1.EchoRequest{Message: "hi"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("echo (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("rest", func(t *testing.T) {
		tok, err := signer.Mint(call.Caller, time.Now(), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/testing/echo", strings.NewReader(`{"message":"hi"}`))
		req.Header.Set("Content-Type", "application/json")
		mesh.SetHeaders(req.Header, tok, "k-1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var got map[string]any
		if err := json.NewDecoder(res.Body).Decode(&got); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusOK || got["agent_id"] != "a1" || got["idempotency_key"] != "k-1" {
			t.Errorf("REST echo = %d %v, want 200 with agent a1 and key k-1", res.StatusCode, got)
		}
	})
}

func TestCallsWithoutAValidMeshTokenAreUnauthenticated(t *testing.T) {
	logs := &logtest.Buffer{}
	base, signer := start(t, logs)
	other, err := mesh.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := mesh.NewSigner(other, "stranger")
	if err != nil {
		t.Fatal(err)
	}
	expired, err := signer.Mint(mesh.Caller{Agent: "a1"}, time.Now().Add(-time.Hour), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := stranger.Mint(mesh.Caller{Agent: "a1"}, time.Now(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		header  http.Header
		wantMsg string
		logged  bool
	}{
		"no token":             {http.Header{}, "toolmesh token --agent", false},
		"bare agent header":    {http.Header{"Toolmesh-Agent": {"a1"}}, "missing mesh token", false},
		"expired token":        {http.Header{"Authorization": {"Bearer " + expired}}, "expired", true},
		"token from other key": {http.Header{"Authorization": {"Bearer " + foreign}}, "unknown key", true},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			before := strings.Count(logs.String(), "boundary.validation_failed")
			res, err := testingv1connect.NewTestingServiceClient(h2cClient(), base, connect.WithInterceptors(headerInterceptor(c.header))).Echo(context.Background(), &testingv1.EchoRequest{Message: "hi"})
			if err == nil {
				t.Fatalf("Echo = %v, want Unauthenticated", res)
			}
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated || !strings.Contains(ce.Message(), c.wantMsg) {
				t.Errorf("Echo error = %v, want Unauthenticated mentioning %q", err, c.wantMsg)
			}
			after := strings.Count(logs.String(), "boundary.validation_failed")
			if c.logged && after-before != 1 {
				t.Errorf("boundary.validation_failed events = %d, want exactly 1", after-before)
			}
		})
	}
	if strings.Contains(logs.String(), expired) || strings.Contains(logs.String(), foreign) {
		t.Error("a presented token reached the log")
	}
}

// TestMoreThanOneMeshTokenIsAnInvalidRequest: a service refuses a request
// with two Authorization headers, or two credentials in one, before any
// handler runs, whichever protocol carries it: a proxy that reads the other
// header must not disagree with the service about who is calling.
func TestMoreThanOneMeshTokenIsAnInvalidRequest(t *testing.T) {
	base, signer := start(t, io.Discard)
	mint := func(agent string) string {
		tok, err := signer.Mint(mesh.Caller{Subject: agent, Agent: agent}, time.Now(), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	alice, bob := mint("alice"), mint("bob")
	cases := map[string][]string{
		"alice then bob":             {"Bearer " + alice, "Bearer " + bob},
		"a valid token then junk":    {"Bearer " + alice, "junk"},
		"two credentials in one":     {"Bearer " + alice + ", Bearer " + bob},
		"two tokens after one label": {"Bearer " + alice + " " + bob},
	}
	for name, values := range cases {
		for proto, opts := range map[string][]connect.ClientOption{"connect": nil, "grpc": {connect.WithGRPC()}} {
			t.Run(name+"/"+proto, func(t *testing.T) {
				opts := append(opts, connect.WithInterceptors(headerInterceptor(http.Header{"Authorization": values})))
				res, err := testingv1connect.NewTestingServiceClient(h2cClient(), base, opts...).Echo(context.Background(), &testingv1.EchoRequest{Message: "hi"})
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || !strings.Contains(ce.Message(), "invalid_request") {
					t.Errorf("Echo = %v, %v; want InvalidArgument invalid_request", res, err)
				}
			})
		}
		t.Run(name+"/rest", func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/testing/echo", strings.NewReader(`{"message":"hi"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header["Authorization"] = values
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "invalid_request") {
				t.Errorf("REST echo = %d %s, want 400 invalid_request", res.StatusCode, body)
			}
		})
	}
}

// headerInterceptor adds fixed headers to every outgoing request.
func headerInterceptor(h http.Header) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			for k, v := range h {
				req.Header()[k] = v
			}
			return next(ctx, req)
		}
	})
}

func TestNewRefusesToRunWithoutAVerifier(t *testing.T) {
	lis, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	if _, err := server.New(context.Background(), lis, logging.Discard(), server.Options{}, testingsvc.New().Server()); err == nil {
		t.Fatal("server.New without a mesh verifier succeeded")
	}
}

// TestSmallAnswersAreNotCompressed: a client that accepts gzip (every
// Connect client does by default) gets a small answer as it is; compressing
// it would cost the service more CPU than the call itself.
func TestSmallAnswersAreNotCompressed(t *testing.T) {
	base, signer := start(t, io.Discard)
	tok, err := signer.Mint(mesh.Caller{Agent: "a1"}, time.Now(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+testingv1connect.TestingServiceEchoProcedure, strings.NewReader(`{"message":"`+strings.Repeat("x", 200)+`"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept-Encoding", "gzip")
	mesh.SetHeaders(req.Header, tok, "")
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Encoding") != "" {
		t.Errorf("echo = %d, Content-Encoding %q: %.200s; want 200, uncompressed", res.StatusCode, res.Header.Get("Content-Encoding"), body)
	}
}
