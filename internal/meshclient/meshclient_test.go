package meshclient_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/meshclient"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestAClientCallsAsItsCallerWithinItsDeadline: a mesh client sends the
// mesh token of the caller in its context, with the call's idempotency
// key, and gives up on a call past its timeout; without a signer it sends
// none of its own.
func TestAClientCallsAsItsCallerWithinItsDeadline(t *testing.T) {
	t.Parallel()
	srv := servertest.Start(t, testingsvc.New().Server())
	signed := meshclient.New(meshclient.Config{HTTP: srv.Client(), Signer: servertest.MeshSigner(), Timeout: 300 * time.Millisecond},
		testingv1connect.NewTestingServiceClient, srv.URL+"/")
	ctx := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: "user-1", Agent: "agent-1", Depth: 2}, IdempotencyKey: "key-1"})
	res, err := signed.Echo(ctx, &testingv1.EchoRequest{Message: "hi"})
	if err != nil || res.GetAgentId() != "agent-1" || res.GetSubject() != "user-1" || res.GetDepth() != 2 || res.GetIdempotencyKey() != "key-1" {
		t.Errorf("Echo as agent-1 = %+v, %v; want the caller, its depth and key", res, err)
	}
	if _, err := signed.Wait(ctx, &testingv1.WaitRequest{Millis: 10000}); connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("a 10s wait through a client with a 300ms timeout = %v, want deadline exceeded", err)
	}
	unsigned := meshclient.New(meshclient.Config{HTTP: srv.Client()}, testingv1connect.NewTestingServiceClient, srv.URL)
	if _, err := unsigned.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("Echo without a signer or a served call's token = %v, want unauthenticated", err)
	}
}

// TestAPlainTextRefusalIsUnavailable: a request the service's HTTP server
// refused in plain text (net/http's "400 Bad Request" for a request it
// could not read) is a transport fault with net/http's reason in it, not
// the service's internal error; a service's own Connect error is passed on.
func TestAPlainTextRefusalIsUnavailable(t *testing.T) {
	t.Parallel()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "400 Bad Request: malformed MIME header line", http.StatusBadRequest)
	}))
	defer refusing.Close()
	c := meshclient.New(meshclient.Config{Signer: servertest.MeshSigner()}, testingv1connect.NewTestingServiceClient, refusing.URL)
	ctx := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "agent-1"}})
	_, err := c.Echo(ctx, &testingv1.EchoRequest{Message: "hi"})
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "malformed MIME header line") {
		t.Errorf("Echo refused in plain text = %v, want unavailable with net/http's reason", err)
	}
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	missing := meshclient.New(meshclient.Config{Signer: servertest.MeshSigner()}, testingv1connect.NewTestingServiceClient, notFound.URL)
	if _, err := missing.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); connect.CodeOf(err) != connect.CodeUnimplemented {
		t.Errorf("Echo of a procedure the server does not serve (404) = %v, want unimplemented", err)
	}
	srv := servertest.Start(t, testingsvc.New().Server())
	own := meshclient.New(meshclient.Config{Signer: servertest.MeshSigner()}, testingv1connect.NewTestingServiceClient, srv.URL)
	if _, err := own.Echo(ctx, &testingv1.EchoRequest{Message: "hi", Fail: testingv1.Failure_FAILURE_INVALID_ARGUMENT}); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("Echo with the service's own 400 = %v, want invalid_argument", err)
	}
}

// TestACallIsNotRedirected: a service's redirect is not followed, so the
// call's mesh token stays with the service it was minted for.
func TestACallIsNotRedirected(t *testing.T) {
	t.Parallel()
	var followed atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/elsewhere", func(http.ResponseWriter, *http.Request) { followed.Add(1) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	redirecting := httptest.NewServer(mux)
	defer redirecting.Close()
	ctx := mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "agent-1"}})
	c := meshclient.New(meshclient.Config{Signer: servertest.MeshSigner()}, testingv1connect.NewTestingServiceClient, redirecting.URL)
	if _, err := c.Echo(ctx, &testingv1.EchoRequest{Message: "hi"}); err == nil || followed.Load() != 0 {
		t.Errorf("Echo answered with a redirect = %v, and the redirect was followed %d times; want an error and none", err, followed.Load())
	}
}
