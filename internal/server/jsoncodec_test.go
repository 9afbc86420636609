package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/mesh"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// TestJSONRequestsNamingWhatTheContractLacksAreRefused: a Connect, gRPC or
// REST JSON request with a misspelt field or enum value is refused with the
// field's path, not answered as if the field were absent; a binary request
// carrying a field of a newer contract is still answered.
func TestJSONRequestsNamingWhatTheContractLacksAreRefused(t *testing.T) {
	base, signer := start(t, io.Discard)
	tok, err := signer.Mint(mesh.Caller{Agent: "a1"}, time.Now(), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// do sends a request as agent a1 and returns its status and body.
	do := func(method, url, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		mesh.SetHeaders(req.Header, tok, "")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	post := func(contentType, body string) (int, string) {
		t.Helper()
		return do(http.MethodPost, base+testingv1connect.TestingServiceEchoProcedure, contentType, body)
	}
	for _, c := range []struct {
		name, contentType, body string
		want                    []string // in the refusal's message
	}{
		{"misspelt field", "application/json", `{"mesage":"hi"}`,
			[]string{`mesage: unknown field \"mesage\"; the request accepts: message, fail`}},
		{"unknown enum value", "application/json", `{"message":"hi","fail":"FAILURE_BOGUS"}`,
			[]string{"fail: must be one of FAILURE_NOT_FOUND", `got \"FAILURE_BOGUS\"`}},
		{"with a charset", "application/json; charset=utf-8", `{"message":"hi","fail":"FAILURE_BOGUS"}`,
			[]string{"fail: must be one of"}},
	} {
		code, body := post(c.contentType, c.body)
		if code != http.StatusBadRequest || !strings.Contains(body, `"invalid_argument"`) {
			t.Errorf("%s: %s = %d %s, want 400 invalid_argument", c.name, c.body, code, body)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: refusal %s does not say %q", c.name, body, w)
			}
		}
	}
	if code, body := post("application/json", `{"message":"hi"}`); code != http.StatusOK || !strings.Contains(body, `"message":"hi"`) {
		t.Errorf("a good JSON request = %d %s, want 200", code, body)
	}
	// REST names the fault the same way; an empty body is an empty request.
	for body, want := range map[string]string{
		`{"mesage":"hi"}`:                         `mesage: unknown field \"mesage\"; the request accepts: message, fail`,
		`{"message":"hi","fail":"FAILURE_BOGUS"}`: "fail: must be one of FAILURE_NOT_FOUND",
		``: "message: value is required",
	} {
		code, got := do(http.MethodPost, base+"/v1/testing/echo", "application/json", body)
		if code != http.StatusBadRequest || !strings.Contains(got, want) {
			t.Errorf("REST %q = %d %s, want 400 saying %q", body, code, got, want)
		}
	}

	// A query parameter that names no field is refused; one that does is
	// read, by its proto or its JSON name.
	get := func(query string) (int, string) {
		t.Helper()
		return do(http.MethodGet, base+"/v1/testing/notes?"+query, "", "")
	}
	if code, got := get("limt=5"); code != http.StatusBadRequest || !strings.Contains(got, `unknown query parameter \"limt\"; this route takes: offset, limit`) {
		t.Errorf("GET ?limt=5 = %d %s, want 400 naming the parameter", code, got)
	}
	// One that names a field but not a value of its kind says which, and what
	// it takes.
	if code, got := get("offset=0&limit=abc"); code != http.StatusBadRequest || !strings.Contains(got, `query parameter limit: must be an integer (from -2147483648 to 2147483647), got \"abc\"`) {
		t.Errorf("GET ?limit=abc = %d %s, want 400 naming the parameter and what it takes", code, got)
	}
	for _, q := range []string{"limit=5", "offset=0&limit=5"} {
		if code, got := get(q); code != http.StatusOK {
			t.Errorf("GET ?%s = %d %s, want 200", q, code, got)
		}
	}

	// Binary, over gRPC: a field number EchoRequest does not have.
	bin, err := proto.Marshal(&testingv1.EchoRequest{Message: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	bin = protowire.AppendTag(bin, 999, protowire.BytesType)
	bin = protowire.AppendString(bin, "from a newer contract")
	client := testingv1connect.NewTestingServiceClient(h2cClient(), base, connect.WithGRPC(),
		connect.WithInterceptors(mesh.NewClientInterceptor(signer, time.Minute)))
	var req testingv1.EchoRequest
	if err := proto.Unmarshal(bin, &req); err != nil {
		t.Fatal(err)
	}
	res, err := client.Echo(mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Agent: "a1"}}), &req)
	if err != nil || res.GetMessage() != "hi" {
		t.Errorf("binary echo with an unknown field = %v, %v; want hi", res, err)
	}
	if !bytes.Contains(req.ProtoReflect().GetUnknown(), []byte("newer contract")) {
		t.Fatal("the test request lost its unknown field before it was sent")
	}
}
