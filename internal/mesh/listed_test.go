package mesh_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/mesh"
)

// Whose items a list call reads: the owner any agent's or everyone's, an
// agent only its own, refused by name when it asks for another's.
func TestListedAgent(t *testing.T) {
	as := func(agent string, roles ...string) context.Context {
		return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Roles: roles}})
	}
	for _, c := range []struct {
		name      string
		ctx       context.Context
		requested string
		want      string
		code      connect.Code
	}{
		{"the owner, naming none", as("olivia", mesh.RoleOwner), "", "", 0},
		{"the owner, naming an agent", as("olivia", mesh.RoleOwner), "planner", "planner", 0},
		{"an agent, naming none", as("planner"), "", "planner", 0},
		{"an agent, naming itself", as("planner"), "planner", "planner", 0},
		{"an agent, naming another", as("planner"), "booker", "", connect.CodePermissionDenied},
		{"no identity", context.Background(), "", "", connect.CodeUnauthenticated},
	} {
		got, err := mesh.ListedAgent(c.ctx, c.requested, "asks")
		if c.code != 0 {
			if connect.CodeOf(err) != c.code {
				t.Errorf("%s: err %v, want %v", c.name, err, c.code)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, got, err, c.want)
		}
	}
}
