package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/testingsvc"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestUnexpectedErrorsAnswerWithAnErrorIDOverEveryProtocol: a handler's
// internal error and a panic reach Connect, gRPC and REST callers as the
// fixed message with an error id, and the cause is logged under that id; a
// deliberate answer (not found) is passed unchanged.
func TestUnexpectedErrorsAnswerWithAnErrorIDOverEveryProtocol(t *testing.T) {
	logs := &logtest.Buffer{}
	srv := servertest.StartWith(t, servertest.Options{Log: logging.New(logs, nil)}, testingsvc.New().Server())
	ctx := servertest.As(context.Background(), "a1")
	cases := []struct {
		fail  testingv1.Failure
		cause string // in the log, never in the answer
	}{
		{testingv1.Failure_FAILURE_INTERNAL_SECRET, "open store postgres://app:"},
		{testingv1.Failure_FAILURE_PANIC, "panic: testing: panic on request"},
	}
	for _, p := range servertest.Protocols() {
		client := testingv1connect.NewTestingServiceClient(srv.Client(), srv.URL, servertest.ClientOptions(p.Opts)...)
		t.Run(p.Name, func(t *testing.T) {
			for _, c := range cases {
				_, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "x", Fail: c.fail})
				event := servertest.Unexpected(t, err, connect.CodeInternal, logs)
				if got := event["error"].(string); !strings.Contains(got, c.cause) || strings.Contains(got, "hunter2") {
					t.Errorf("%s: logged cause %q, want it to contain %q, secrets scrubbed", c.fail, got, c.cause)
				}
				if strings.Contains(err.Error(), "postgres") || strings.Contains(err.Error(), "panic") {
					t.Errorf("%s: answer %q carries the cause", c.fail, err)
				}
			}
			_, err := client.Echo(ctx, &testingv1.EchoRequest{Message: "x", Fail: testingv1.Failure_FAILURE_NOT_FOUND})
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeNotFound || ce.Message() != "item it_42 not found" || rpcerror.ID(err) != "" {
				t.Errorf("not found answered %v, want the handler's NotFound unchanged, without an error id", err)
			}
		})
	}
	t.Run("rest", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/testing/echo", strings.NewReader(`{"message":"x","fail":"FAILURE_INTERNAL_SECRET"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", servertest.Bearer("a1"))
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var body struct {
			Message string
			Details []struct {
				Reason   string
				Metadata map[string]string
			}
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusInternalServerError || len(body.Details) != 1 {
			t.Fatalf("REST answer %d %+v, want 500 with the error id as a detail", res.StatusCode, body)
		}
		id := body.Details[0].Metadata[rpcerror.MetadataErrorID]
		if body.Message != rpcerror.WithID(rpcerror.MessageInternal, id) {
			t.Errorf("REST message %q, want the fixed message with error id %q", body.Message, id)
		}
		servertest.LoggedError(t, logs, id)
	})
}
