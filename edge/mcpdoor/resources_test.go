package mcpdoor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/identity/identitytest"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
)

// The test backend's notes are served as resources by its notes service:
// toolmesh-test://notes/{note_id} (read with testing_get_note, listed with
// testing_list_notes) and the privileged fixed resource
// toolmesh-test://note-stats (testing_note_stats).
const (
	notesTemplate = "toolmesh-test://notes/{note_id}"
	noteStatsURI  = "toolmesh-test://note-stats"
)

func noteURI(n int) string { return fmt.Sprintf("toolmesh-test://notes/note-%d", n) }

// allResources pages through resources/list by hand, checking each page's
// size, and returns every resource and the number of pages.
func allResources(t *testing.T, cs *mcp.ClientSession) ([]*mcp.Resource, int) {
	t.Helper()
	var all []*mcp.Resource
	cursor, pages := "", 0
	for {
		res, err := cs.ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: cursor})
		if err != nil {
			t.Fatalf("resources/list page %d: %v", pages+1, err)
		}
		pages++
		if len(res.Resources) > 50 {
			t.Errorf("page %d has %d resources, want at most 50", pages, len(res.Resources))
		}
		all = append(all, res.Resources...)
		if res.NextCursor == "" {
			return all, pages
		}
		cursor = res.NextCursor
		if pages > 10 {
			t.Fatal("resources/list does not end")
		}
	}
}

// rpcError is the JSON-RPC error of err, with its data decoded as an
// envelope.
func rpcError(t *testing.T, err error) (*jsonrpc.Error, edgetest.FullEnvelope) {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) {
		t.Fatalf("error %v (%T) is not a JSON-RPC error", err, err)
	}
	var env edgetest.FullEnvelope
	if len(je.Data) > 0 {
		if err := json.Unmarshal(je.Data, &env); err != nil {
			t.Fatalf("error data %s is not an envelope", je.Data)
		}
	}
	return je, env
}

func TestResourcesAtEveryVersion(t *testing.T) {
	t.Parallel()
	f := edgetest.NewNotesFixture(t, nil)
	f.Backend.SeedNotes("local", 120)
	ctx := context.Background()
	for _, v := range edgetest.AllVersions {
		t.Run(v, func(t *testing.T) {
			cs := f.Connect(t, v, "", nil)
			caps := cs.InitializeResult().Capabilities
			if caps.Resources == nil || !caps.Resources.Subscribe || caps.Completions == nil || caps.Prompts != nil {
				t.Errorf("capabilities = %+v, want resources with subscribe and completions, no prompts (no prompt's tools are here)", caps)
			}

			templates, err := cs.ListResourceTemplates(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(templates.ResourceTemplates) != 1 || templates.ResourceTemplates[0].URITemplate != notesTemplate ||
				templates.ResourceTemplates[0].Title != "Note" || templates.ResourceTemplates[0].MIMEType != "application/json" {
				t.Errorf("resources/templates/list = %+v, want the notes template", templates.ResourceTemplates)
			}

			all, pages := allResources(t, cs)
			if len(all) != 121 || pages != 3 {
				t.Fatalf("resources/list = %d resources in %d pages, want the stats and 120 notes in 3 pages", len(all), pages)
			}
			if all[0].URI != noteURI(1) || all[0].Title != "note 1 of local" || all[0].Name != "note-1" || all[119].URI != noteURI(120) || all[120].URI != noteStatsURI {
				t.Errorf("resources = %+v ... %+v, %+v", all[0], all[119], all[120])
			}

			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteURI(7)})
			if err != nil {
				t.Fatal(err)
			}
			if len(read.Contents) != 1 || read.Contents[0].URI != noteURI(7) || read.Contents[0].MIMEType != "application/json" ||
				!edgetest.JsonEqual(read.Contents[0].Text, `{"note":{"id":"note-7","text":"note 7 of local"}}`) {
				t.Errorf("resources/read = %+v", read.Contents)
			}
			if v >= edge.ModernProtocol && (read.TTLMs != int(edge.DefaultResourceTTL.Milliseconds()) || read.CacheScope != "private") {
				t.Errorf("resources/read caching = %d %q, want the resource TTL, private", read.TTLMs, read.CacheScope)
			}
			stats, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteStatsURI})
			if err != nil || !edgetest.JsonEqual(stats.Contents[0].Text, `{"count":120}`) {
				t.Errorf("read %s = %+v, %v", noteStatsURI, stats, err)
			}

			// A note that does not exist, and a malformed id: the tool's
			// errors, as the error's data.
			_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteURI(999)})
			je, env := rpcError(t, err)
			if je.Code != jsonrpc.CodeInvalidParams || env.DomainCode != "not_found" || env.Tool != "testing_get_note" || !strings.Contains(je.Message, "note-999") {
				t.Errorf("reading a missing note = %v %+v, want invalid params carrying not_found", je, env)
			}
			_, err = cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "toolmesh-test://notes/first"})
			if je, env := rpcError(t, err); je.Code != jsonrpc.CodeInvalidParams || env.DomainCode != "invalid_argument" || len(env.Violations) != 1 || env.Violations[0].Field != "note_id" {
				t.Errorf("reading a malformed note id = %v %+v, want invalid_argument naming note_id", je, env)
			}
			if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "toolmesh-test://elsewhere"}); err == nil {
				t.Error("reading a URI no template matches succeeded")
			}

			done, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: notesTemplate},
				Argument: mcp.CompleteParamsArgument{Name: "note_id", Value: "NOTE-11"}})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"note-11", "note-110", "note-111", "note-112", "note-113", "note-114", "note-115", "note-116", "note-117", "note-118", "note-119"}
			if !slices.Equal(done.Completion.Values, want) || done.Completion.HasMore {
				t.Errorf("completion of note-11 = %+v, want %v", done.Completion, want)
			}
			done, err = cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: notesTemplate},
				Argument: mcp.CompleteParamsArgument{Name: "note_id", Value: ""}})
			if err != nil || len(done.Completion.Values) != 100 || !done.Completion.HasMore {
				t.Errorf("completion of nothing = %d values, hasMore %v (%v), want 100 and more", len(done.Completion.Values), done.Completion.HasMore, err)
			}
			if _, err := cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: notesTemplate},
				Argument: mcp.CompleteParamsArgument{Name: "nope", Value: ""}}); err == nil {
				t.Error("completing a variable the template does not have succeeded")
			}
		})
	}
	if n := f.Backend.Calls("ListNotes"); n == 0 {
		t.Error("resources/list never listed the notes through the list tool")
	}
}

// A reader sees exactly what the tool would show it: its own notes, only
// the resources its grants allow, and the tool's errors.
func TestResourcesFollowTheCallersIdentityAndGrants(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	grants, err := identity.ParseGrants([]byte("subjects:\n  alice:\n    tools: [testing_note_stats]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := edgetest.NewNotesFixture(t, func(c *edge.Config) { c.Auth = iss.AuthConfig(t); c.Grants = grants })
	f.Backend.SeedNotes("agent-a", 3)
	f.Backend.SeedNotes("agent-b", 1)
	res := edgetest.ResourceFor(f.HTTP)
	token := func(subject, agent, scope string) string {
		c := iss.Valid(res, subject, scope)
		c.AgentID = agent
		return iss.Sign(t, jose.ES256, c)
	}
	ctx := context.Background()
	alice := f.Connect(t, "2025-11-25", token("alice", "agent-a", "toolmesh:read"), nil)
	bob := f.Connect(t, "2025-11-25", token("bob", "agent-b", "toolmesh:read"), nil)
	nobody := f.Connect(t, "2025-11-25", token("carol", "agent-c", "toolmesh:tool:testing_echo"), nil)

	uris := func(rs []*mcp.Resource) []string {
		var out []string
		for _, r := range rs {
			out = append(out, r.URI)
		}
		return out
	}
	if got, _ := allResources(t, alice); !slices.Equal(uris(got), []string{noteURI(1), noteURI(2), noteURI(3), noteStatsURI}) {
		t.Errorf("alice's resources = %v", uris(got))
	}
	if got, _ := allResources(t, bob); !slices.Equal(uris(got), []string{noteURI(1)}) {
		t.Errorf("bob's resources = %v, want his one note and not the privileged stats", uris(got))
	}
	if got, _ := allResources(t, nobody); len(got) != 0 {
		t.Errorf("a caller without the read scope lists %v", uris(got))
	}
	if tl, err := nobody.ListResourceTemplates(ctx, nil); err != nil || len(tl.ResourceTemplates) != 0 {
		t.Errorf("a caller without the read scope sees templates %+v (%v)", tl, err)
	}

	// Bob reading alice's third note gets what testing_get_note tells him.
	_, err = bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteURI(3)})
	_, readEnv := rpcError(t, err)
	_, toolEnv := edgetest.CallEnv(t, bob, "testing_get_note", map[string]any{"note_id": "note-3"})
	if readEnv.DomainCode != "not_found" || readEnv.Message != toolEnv.Message || readEnv.DomainCode != toolEnv.DomainCode {
		t.Errorf("bob reading note-3 = %+v, the tool says %+v", readEnv, toolEnv)
	}
	_, err = bob.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteStatsURI})
	je, env := rpcError(t, err)
	_, toolEnv = edgetest.CallEnv(t, bob, "testing_note_stats", map[string]any{})
	if je.Code != jsonrpc.CodeInternalError || env.DomainCode != "permission_denied" || env.Message != toolEnv.Message {
		t.Errorf("bob reading the privileged stats = %v %+v, the tool says %+v", je, env, toolEnv)
	}
	if stats, err := alice.ReadResource(ctx, &mcp.ReadResourceParams{URI: noteStatsURI}); err != nil || !edgetest.JsonEqual(stats.Contents[0].Text, `{"count":3}`) {
		t.Errorf("alice reading her stats = %+v, %v", stats, err)
	}
	if _, err := nobody.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: notesTemplate},
		Argument: mcp.CompleteParamsArgument{Name: "note_id", Value: "note"}}); err != nil {
		t.Errorf("completion for a caller who may not list: %v, want an empty completion", err)
	}
	if c, err := bob.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/resource", URI: notesTemplate},
		Argument: mcp.CompleteParamsArgument{Name: "note_id", Value: "note"}}); err != nil || !slices.Equal(c.Completion.Values, []string{"note-1"}) {
		t.Errorf("bob's completion = %+v, %v, want only his note", c, err)
	}
	if n := f.Backend.Calls("NoteStats"); n != 1 {
		t.Errorf("the privileged stats reached the service %d times, want once (alice's read)", n)
	}
}

func TestResourcesListFailsWithTheListToolsError(t *testing.T) {
	t.Parallel()
	f := edgetest.NewNotesFixture(t, func(c *edge.Config) { c.Services[testingv1connect.TestingNotesServiceName] = "http://127.0.0.1:1" })
	cs := f.Connect(t, "", "", nil)
	_, err := cs.ListResources(context.Background(), nil)
	if je, env := rpcError(t, err); je.Code != jsonrpc.CodeInternalError || env.DomainCode != "unavailable" || env.Tool != "testing_list_notes" {
		t.Errorf("resources/list with the notes service down = %v %+v, want the list tool's unavailable", je, env)
	}
	if _, err := cs.ListResources(context.Background(), &mcp.ListResourcesParams{Cursor: "not-a-cursor"}); err == nil {
		t.Error("a forged cursor was accepted")
	}
}

// A session subscribed to a resource hears when it changes: the edge polls
// it as the subscriber, without spending the subscriber's rate limit.
func TestSubscribersHearOfChanges(t *testing.T) {
	t.Parallel()
	f := edgetest.NewNotesFixture(t, func(c *edge.Config) {
		c.MCP.ResourcePollInterval = 20 * time.Millisecond
		// Two subscription reads per version and one call at the end.
		c.RateLimit = edge.RateLimit{PerSecond: 0.001, Burst: 7}
	})
	f.Backend.SeedNotes("local", 2)
	ctx := context.Background()
	for _, v := range []string{"2025-11-25", "2025-03-26", edge.ModernProtocol} {
		t.Run(v, func(t *testing.T) {
			var mu sync.Mutex
			var updated []string
			cs := f.Connect(t, v, "", &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
				mu.Lock()
				updated = append(updated, r.Params.URI)
				mu.Unlock()
			}})
			heard := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(updated) }
			// (On 2026-07-28 a subscription is a stream the client opens
			// in the background; a refusal ends that stream.)
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: noteURI(9)}); err == nil && v < edge.ModernProtocol {
				t.Error("subscribing to a note that does not exist succeeded")
			}
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: noteStatsURI}); err != nil {
				t.Fatal(err)
			}
			polled := f.Backend.Calls("NoteStats")
			edgetest.WaitFor(t, func() bool { return f.Backend.Calls("NoteStats") > polled+5 }, "the edge to poll the subscribed resource")
			if got := heard(); len(got) != 0 {
				t.Errorf("heard %v before anything changed", got)
			}
			f.Backend.SeedNotes("local", 1)
			edgetest.WaitFor(t, func() bool { return len(heard()) > 0 }, "notifications/resources/updated")
			if got := heard(); got[0] != noteStatsURI {
				t.Errorf("heard %v, want %s", got, noteStatsURI)
			}
			if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: noteStatsURI}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// Three versions subscribed and were polled many times; the polls spent
	// nothing of the local caller's calls.
	cs := f.Connect(t, "", "", nil)
	if _, env := edgetest.CallEnv(t, cs, "testing_echo", map[string]any{"message": "still allowed"}); env.Status != "ok" {
		t.Errorf("a call after the polls = %+v, want ok: polls must not spend the rate limit", env)
	}
}

// With authentication, a 2026-07-28 subscription (a subscriptions/listen
// stream) is read as the caller its token names.
func TestStatelessSubscriptionsKnowTheCaller(t *testing.T) {
	t.Parallel()
	iss := identitytest.NewIssuer(t)
	grants, err := identity.ParseGrants([]byte("subjects:\n  alice:\n    tools: [testing_note_stats]\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := edgetest.NewNotesFixture(t, func(c *edge.Config) {
		c.Auth, c.Grants = iss.AuthConfig(t), grants
		c.MCP.ResourcePollInterval = 20 * time.Millisecond
	})
	c := iss.Valid(edgetest.ResourceFor(f.HTTP), "alice", "toolmesh:read")
	c.AgentID = "agent-a"
	updated := make(chan string, 10)
	cs := f.Connect(t, edge.ModernProtocol, iss.Sign(t, jose.ES256, c), &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		updated <- r.Params.URI
	}})
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: noteStatsURI}); err != nil {
		t.Fatal(err)
	}
	edgetest.WaitFor(t, func() bool { return f.Backend.Calls("NoteStats") > 2 }, "the edge to poll the subscribed resource")
	f.Backend.SeedNotes("agent-a", 1)
	select {
	case uri := <-updated:
		if uri != noteStatsURI {
			t.Errorf("heard %s", uri)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notifications/resources/updated on the 2026-07-28 subscription")
	}
}
