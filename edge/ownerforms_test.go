package edge_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1/connectionsv1connect"
)

// TestOwnerForms: an RPC marked owner_form is no tool (tools/list does
// not show it) and the edge forwards it, as it came, only for the owner
// and only from a server (no Origin), with the owner's mesh token; the
// others reach no service. Nothing of the body is logged.
func TestOwnerForms(t *testing.T) {
	const secret = "ghp_ownerFormSecret0001"
	var mu sync.Mutex
	var got []string // "<subject> <body>" of each request the service received
	verifier := servertest.MeshSigner().Verifier()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		c, err := verifier.Verify(tok, time.Now())
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, c.Subject+" "+strings.Join(c.Roles, ",")+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"connection":{"id":"con_01","agent":"agent-a","account":"octo"}}`))
	}))
	t.Cleanup(svc.Close)
	iss := identitytest.NewIssuer(t)
	f := edgetest.NewFixture(t, func(c *edge.Config) {
		c.Contracts = append(c.Contracts, connectionsv1.File_toolmesh_connections_v1_connections_proto.Services().ByName("ConnectionsService"))
		c.Services[connectionsv1connect.ConnectionsServiceName] = svc.URL
		c.HTTPClient = http.DefaultClient
		c.Auth = iss.AuthConfig(t)
	})
	resource := edgetest.ResourceFor(f.HTTP)
	token := func(roles ...string) string {
		c := iss.Valid(resource, "ann", "toolmesh:read toolmesh:write toolmesh:admin")
		c.Roles = roles
		return iss.Sign(t, jose.RS256, c)
	}
	formURL := strings.TrimSuffix(f.URL, "/mcp") + edge.PathOwnerForms + connectionsv1connect.ConnectionsServiceLinkTokenProcedure
	send := func(bearer, origin string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, formURL, strings.NewReader(`{"agent":"agent-a","provider":"PROVIDER_GITHUB","token":"`+secret+`"}`))
		req.Header.Set("Content-Type", "application/json")
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	for name, tc := range map[string]struct {
		bearer, origin string
		status         int
	}{
		"no credentials":        {"", "", http.StatusUnauthorized},
		"not the owner":         {token("admin"), "", http.StatusForbidden},
		"from a browser page":   {token(mesh.RoleOwner), "http://127.0.0.1:9", http.StatusForbidden},
		"the edge's own origin": {token(mesh.RoleOwner), strings.TrimSuffix(f.URL, "/mcp"), http.StatusForbidden},
	} {
		if status, body := send(tc.bearer, tc.origin); status != tc.status {
			t.Errorf("%s: answered %d %s, want %d", name, status, body, tc.status)
		}
	}
	mu.Lock()
	if len(got) != 0 {
		t.Errorf("refused forms reached the service: %q", got)
	}
	mu.Unlock()

	status, body := send(token(mesh.RoleOwner), "")
	if status != http.StatusOK || !strings.Contains(body, `"account":"octo"`) {
		t.Fatalf("the owner's form answered %d %s, want the service's answer", status, body)
	}
	mu.Lock()
	if len(got) != 1 || !strings.HasPrefix(got[0], "ann owner /toolmesh.connections.v1.ConnectionsService/LinkToken {") || !strings.Contains(got[0], secret) {
		t.Errorf("the service received %q, want the form as sent, as ann with the owner role", got)
	}
	mu.Unlock()
	if strings.Contains(f.Logs.String(), secret) {
		t.Error("the edge logged the form's token")
	}

	// Not a tool.
	cs := f.Connect(t, "", token(mesh.RoleOwner), nil)
	tools, err := cs.ListTools(context.Background(), &mcp.ListToolsParams{})
	if err != nil {
		t.Fatal(err)
	}
	listed := false
	for _, tl := range tools.Tools {
		listed = listed || tl.Name == "connections_list"
		if strings.HasPrefix(tl.Name, "connections_") && tl.Name != "connections_list" && tl.Name != "connections_delete" {
			t.Errorf("tools/list shows %s, want only the connections' list and delete tools", tl.Name)
		}
	}
	if !listed {
		t.Error("tools/list does not show connections_list: the contract's tools are not served")
	}
}
