package main

import (
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	"github.com/toolmesh/toolmesh/services/messages"
	"github.com/toolmesh/toolmesh/services/messages/messagesstore"
)

// TestCallsOnBehalfOfAMessageRunAtItsDepth: a chain of agents, each
// messaging the next on behalf of the message it got, through the edge,
// reaches depth 3 and is refused there; only a message the caller received
// lends its depth.
func TestCallsOnBehalfOfAMessageRunAtItsDepth(t *testing.T) {
	st, err := messagesstore.Open(t.Context(), sqldbtest.Open(t, filepath.Join(t.TempDir(), "messages.db")))
	if err != nil {
		t.Fatal(err)
	}
	srv := servertest.Start(t, messages.New(st, messages.Config{}).Registration())
	client := servertest.HTTPClient()
	t.Cleanup(client.CloseIdleConnections)
	as := func(agent string) *mcp.ClientSession {
		_, s := connectEdge(t, edge.Config{Services: map[string]string{messagesv1connect.MessagesServiceName: srv.URL}, DevAgent: agent, HTTPClient: client})
		return s
	}
	type sent struct{ Message inboxMessage }
	send := func(s *mcp.ClientSession, to, text, onBehalfOf string) envelope {
		var meta mcp.Meta
		if onBehalfOf != "" {
			meta = mcp.Meta{edge.MetaOnBehalfOf: onBehalfOf}
		}
		return callToolMeta(t, s, "messages_send", map[string]any{"to_agent": to, "message": text}, meta)
	}
	chain := []string{"alice", "bob", "carol", "dave"}
	var prev sent
	for i, agent := range chain[:3] {
		var got sent
		okData(t, send(as(agent), chain[i+1], "step "+agent, prev.Message.ID), &got)
		if got.Message.Depth != i+1 {
			t.Errorf("%s's message, sent on behalf of depth %d, has depth %d; want %d", agent, prev.Message.Depth, got.Message.Depth, i+1)
		}
		prev = got
	}
	dave := as("dave")
	const refusal = "Cannot send message: invocation depth 3 exceeds maximum of 3."
	if env := send(dave, "alice", "step dave", prev.Message.ID); env.DomainCode != "conflict" || env.Message != refusal {
		t.Errorf("dave at depth 3 = %+v, want conflict %q", env, refusal)
	}
	// Without the _meta dave starts a new chain.
	if env := send(dave, "alice", "a new chain", ""); env.Status != "ok" {
		t.Errorf("dave on his own = %+v, want ok", env)
	}
	// A message the caller did not receive, or no message id, lends nothing.
	mallory := as("mallory")
	for what, id := range map[string]string{"dave's message": prev.Message.ID, "no message id": "not-a-message-id"} {
		env := send(mallory, "alice", "borrowed depth", id)
		if env.DomainCode != "invalid_argument" || len(env.Violations) != 1 || env.Violations[0].Field != "_meta."+edge.MetaOnBehalfOf {
			t.Errorf("mallory on behalf of %s = %+v, want invalid_argument on the _meta field", what, env)
		}
	}
}
