package messages_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/prototest"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	"github.com/toolmesh/toolmesh/internal/testsupport/sqldbtest"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	pagev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/page/v1"
	"github.com/toolmesh/toolmesh/services/messages"
	"github.com/toolmesh/toolmesh/services/messages/messagesstore"
)

// clock is a settable clock for a test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// start serves the messages service on SQLite with the clock c.
func start(t *testing.T, c *clock) *servertest.Server {
	t.Helper()
	st, err := messagesstore.Open(t.Context(), sqldbtest.SQLite().Open(t))
	if err != nil {
		t.Fatal(err)
	}
	return servertest.Start(t, messages.New(st, messages.Config{Now: c.Now}).Registration())
}

// eachProtocol runs fn against a fresh server, with its clock at t0, once
// over Connect and once over gRPC.
func eachProtocol(t *testing.T, fn func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock)) {
	var clk *clock
	servertest.EachProtocol(t, func(t *testing.T) *servertest.Server {
		clk = &clock{t: t0}
		return start(t, clk)
	}, messagesv1connect.NewMessagesServiceClient, func(t *testing.T, c messagesv1connect.MessagesServiceClient) {
		fn(t, c, clk)
	})
}

func as(agent string) context.Context { return servertest.As(context.Background(), agent) }

// atDepth returns ctx acting as agent from inside depth tool invocations.
func atDepth(agent string, depth int) context.Context {
	return mesh.WithCall(context.Background(), mesh.Call{Caller: mesh.Caller{Subject: agent, Agent: agent, Depth: depth}})
}

func send(t *testing.T, c messagesv1connect.MessagesServiceClient, ctx context.Context, req *messagesv1.SendRequest) *messagesv1.SendResponse {
	t.Helper()
	res, err := c.Send(ctx, req)
	if err != nil {
		t.Fatalf("Send %q to %s: %v", req.GetMessage(), req.GetToAgent(), err)
	}
	return res
}

// inbox returns the ids of agent's whole inbox, newest first.
func inbox(t *testing.T, c messagesv1connect.MessagesServiceClient, agent string) []string {
	t.Helper()
	res, err := c.List(as(agent), &messagesv1.ListRequest{Limit: 200})
	if err != nil {
		t.Fatalf("List inbox of %s: %v", agent, err)
	}
	return prototest.IDs(res.GetMessages())
}

func TestSendInboxAndThreads(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		first := send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: "bob", Message: "hello bob"})
		m := first.GetMessage()
		if first.GetDuplicateSuppressed() || m.GetFromAgent() != "alice" || m.GetToAgent() != "bob" || m.GetText() != "hello bob" ||
			!strings.HasPrefix(m.GetThreadId(), "thr_") || !m.GetCreateTime().AsTime().Equal(t0) {
			t.Errorf("sent message = %v (suppressed %v), want alice -> bob in a new thread at %v", m, first.GetDuplicateSuppressed(), t0)
		}
		thread := m.GetThreadId()

		clk.Set(t0.Add(time.Second))
		reply := send(t, c, as("bob"), &messagesv1.SendRequest{ToAgent: "alice", Message: "hi alice", ThreadId: thread}).GetMessage()
		if reply.GetThreadId() != thread {
			t.Errorf("reply thread = %s, want %s", reply.GetThreadId(), thread)
		}
		clk.Set(t0.Add(2 * time.Second))
		other := send(t, c, as("carol"), &messagesv1.SendRequest{ToAgent: "bob", Message: "from carol"}).GetMessage()
		if other.GetThreadId() == thread {
			t.Error("a send without thread_id joined an existing thread")
		}
		clk.Set(t0.Add(3 * time.Second))
		third := send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: "bob", Message: "and more", ThreadId: thread}).GetMessage()

		if diff := cmp.Diff([]string{third.GetId(), other.GetId(), m.GetId()}, inbox(t, c, "bob")); diff != "" {
			t.Errorf("bob's inbox is not the messages to bob, newest first (-want +got):\n%s", diff)
		}
		page, err := c.List(as("bob"), &messagesv1.ListRequest{Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		next := int32(2)
		if diff := cmp.Diff(&pagev1.Page{Offset: 0, Limit: 2, Total: 3, NextOffset: &next}, page.GetPage(), protocmp.Transform()); diff != "" {
			t.Errorf("inbox page (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{reply.GetId()}, inbox(t, c, "alice")); diff != "" {
			t.Errorf("alice's inbox (-want +got):\n%s", diff)
		}

		res, err := c.List(as("alice"), &messagesv1.ListRequest{ThreadId: thread})
		if err != nil {
			t.Fatalf("List thread: %v", err)
		}
		if diff := cmp.Diff([]string{third.GetId(), reply.GetId(), m.GetId()}, prototest.IDs(res.GetMessages())); diff != "" {
			t.Errorf("thread, newest first (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(reply, res.GetMessages()[1], protocmp.Transform()); diff != "" {
			t.Errorf("listed message differs from the sent one (-sent +listed):\n%s", diff)
		}
		page2, err := c.List(as("bob"), &messagesv1.ListRequest{ThreadId: thread, Offset: 2, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{m.GetId()}, prototest.IDs(page2.GetMessages())); diff != "" || page2.GetPage().NextOffset != nil {
			t.Errorf("last thread page = %v, next %v; want only the first message (%s)", prototest.IDs(page2.GetMessages()), page2.GetPage().NextOffset, diff)
		}

		// Carol is not part of the thread: she can neither read nor join it.
		if _, err := c.List(as("carol"), &messagesv1.ListRequest{ThreadId: thread}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("outsider lists the thread: code %v, want not_found", connect.CodeOf(err))
		}
		if _, err := c.Send(as("carol"), &messagesv1.SendRequest{ToAgent: "bob", Message: "let me in", ThreadId: thread}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("outsider posts to the thread: code %v, want not_found", connect.CodeOf(err))
		}
		if _, err := c.Send(as("alice"), &messagesv1.SendRequest{ToAgent: "bob", Message: "x", ThreadId: "thr_00000000000000000000000000"}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("send to unknown thread: code %v, want not_found", connect.CodeOf(err))
		}
		if got := inbox(t, c, "bob"); len(got) != 3 {
			t.Errorf("refused sends stored messages: bob has %d, want 3", len(got))
		}
	})
}

func TestSendIsRefusedFromDepthThree(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		if _, err := c.Send(atDepth("alice", 2), &messagesv1.SendRequest{ToAgent: "bob", Message: "at depth 2"}); err != nil {
			t.Fatalf("send at depth 2: %v, want it sent", err)
		}
		for depth, want := range map[int]string{
			3: "Cannot send message: invocation depth 3 exceeds maximum of 3.",
			7: "Cannot send message: invocation depth 7 exceeds maximum of 3.",
		} {
			_, err := c.Send(atDepth("alice", depth), &messagesv1.SendRequest{ToAgent: "bob", Message: "too deep"})
			if servertest.Code(t, err) != connect.CodeFailedPrecondition {
				t.Errorf("send at depth %d: code %v, want failed_precondition", depth, connect.CodeOf(err))
				continue
			}
			var ce *connect.Error
			errors.As(err, &ce)
			if ce.Message() != want {
				t.Errorf("send at depth %d: message %q, want %q", depth, ce.Message(), want)
			}
		}
		if got := inbox(t, c, "bob"); len(got) != 1 {
			t.Errorf("bob has %d messages, want only the one sent at depth 2", len(got))
		}
		if messages.MaxDepth != 3 {
			t.Errorf("MaxDepth = %d, want 3", messages.MaxDepth)
		}
	})
}

func TestMessagesCarryTheirRecipientsDepth(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		// A message asks for work one invocation deeper than its sender.
		for sender, depth := range map[string]int{"alice": 0, "carol": 2} {
			m := send(t, c, atDepth(sender, depth), &messagesv1.SendRequest{ToAgent: "bob", Message: "from " + sender}).GetMessage()
			if m.GetDepth() != int32(depth+1) {
				t.Errorf("sent at depth %d: stored depth %d, want %d", depth, m.GetDepth(), depth+1)
			}
			got, err := c.Get(as("bob"), &messagesv1.GetRequest{MessageId: m.GetId()})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(m, got.GetMessage(), protocmp.Transform()); diff != "" {
				t.Errorf("messages_get by the recipient (-sent +got):\n%s", diff)
			}
			if _, err := c.Get(as(sender), &messagesv1.GetRequest{MessageId: m.GetId()}); err != nil {
				t.Errorf("messages_get by the sender: %v", err)
			}
			// To anyone else it does not exist.
			if _, err := c.Get(as("mallory"), &messagesv1.GetRequest{MessageId: m.GetId()}); servertest.Code(t, err) != connect.CodeNotFound {
				t.Errorf("messages_get by a third agent: %v, want not_found", err)
			}
		}
		if _, err := c.Get(as("bob"), &messagesv1.GetRequest{MessageId: "msg_00000000000000000000000000"}); servertest.Code(t, err) != connect.CodeNotFound {
			t.Errorf("messages_get of an unknown id: %v, want not_found", err)
		}
	})
}

func TestDuplicateWithinThirtySecondsIsSuppressed(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		req := &messagesv1.SendRequest{ToAgent: "bob", Message: "status update"}
		orig := send(t, c, as("alice"), req).GetMessage()

		clk.Set(t0.Add(29 * time.Second))
		res := send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: "bob", Message: "status update", ThreadId: orig.GetThreadId()})
		if !res.GetDuplicateSuppressed() {
			t.Error("same message 29 s later: duplicate_suppressed false, want true")
		}
		if diff := cmp.Diff(orig, res.GetMessage(), protocmp.Transform()); diff != "" {
			t.Errorf("suppressed send must return the original message (-orig +got):\n%s", diff)
		}
		if got := inbox(t, c, "bob"); len(got) != 1 {
			t.Fatalf("after a suppressed duplicate bob has %d messages, want 1", len(got))
		}

		// Others are not suppressed: another recipient, another sender.
		if send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: "carol", Message: "status update"}).GetDuplicateSuppressed() {
			t.Error("the same text to another recipient was suppressed")
		}
		if send(t, c, as("dave"), req).GetDuplicateSuppressed() {
			t.Error("the same text from another sender was suppressed")
		}

		// The window runs from the stored original, not from the suppressed
		// attempt: 31 s after it, the message is stored again.
		clk.Set(t0.Add(31 * time.Second))
		again := send(t, c, as("alice"), req)
		if again.GetDuplicateSuppressed() || again.GetMessage().GetId() == orig.GetId() {
			t.Errorf("same message 31 s later: suppressed %v, id %s; want a newly stored message", again.GetDuplicateSuppressed(), again.GetMessage().GetId())
		}
		if got := inbox(t, c, "bob"); len(got) != 3 {
			t.Errorf("bob has %d messages, want 3 (original, dave's, the one 31 s later)", len(got))
		}
		// The new message restarts the window.
		clk.Set(t0.Add(60 * time.Second))
		if !send(t, c, as("alice"), req).GetDuplicateSuppressed() {
			t.Error("29 s after the re-sent message: not suppressed, want suppressed")
		}
	})
}

func TestDuplicateWindowEndsAtExactlyThirtySeconds(t *testing.T) {
	if messages.DedupWindow != 30*time.Second {
		t.Fatalf("DedupWindow = %v, want 30s", messages.DedupWindow)
	}
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		req := &messagesv1.SendRequest{ToAgent: "bob", Message: "ping"}
		send(t, c, as("alice"), req)
		clk.Set(t0.Add(30*time.Second - time.Millisecond))
		if !send(t, c, as("alice"), req).GetDuplicateSuppressed() {
			t.Error("29.999 s later: not suppressed, want suppressed")
		}
		clk.Set(t0.Add(30 * time.Second))
		if send(t, c, as("alice"), req).GetDuplicateSuppressed() {
			t.Error("exactly 30 s later: suppressed, want stored (the window is younger than 30 s)")
		}
	})
}

func TestDuplicateIsDecidedByTheFirst200Characters(t *testing.T) {
	if messages.DedupPrefix != 200 {
		t.Fatalf("DedupPrefix = %d, want 200", messages.DedupPrefix)
	}
	cases := []struct {
		name   string
		a, b   string
		isSame bool
	}{
		{"differ only at character 201", strings.Repeat("x", 200) + "a", strings.Repeat("x", 200) + "b", true},
		{"differ at character 200", strings.Repeat("x", 199) + "a", strings.Repeat("x", 199) + "b", false},
		{"second is the first 200 characters only", strings.Repeat("y", 200) + " and more", strings.Repeat("y", 200), true},
		// Characters, not bytes: é is two bytes in UTF-8.
		{"multi-byte, differ at character 151", strings.Repeat("é", 150) + "a", strings.Repeat("é", 150) + "b", false},
		{"multi-byte, differ at character 201", strings.Repeat("é", 200) + "a", strings.Repeat("é", 200) + "b", true},
	}
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		for i, tc := range cases {
			to := string(rune('a'+i)) + "-recipient"
			first := send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: to, Message: tc.a})
			clk.Set(clk.Now().Add(time.Second))
			second := send(t, c, as("alice"), &messagesv1.SendRequest{ToAgent: to, Message: tc.b})
			if second.GetDuplicateSuppressed() != tc.isSame {
				t.Errorf("%s: duplicate_suppressed %v, want %v", tc.name, second.GetDuplicateSuppressed(), tc.isSame)
			}
			if tc.isSame && second.GetMessage().GetText() != tc.a {
				t.Errorf("%s: suppressed send returned text %q, want the original's", tc.name, second.GetMessage().GetText())
			}
			if !tc.isSame && second.GetMessage().GetId() == first.GetMessage().GetId() {
				t.Errorf("%s: second send returned the first message", tc.name)
			}
		}
	})
}

func TestConcurrentIdenticalSendsStoreOneMessage(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		const n = 8
		var (
			wg         sync.WaitGroup
			mu         sync.Mutex
			stored     int
			errs       []error
			messageIDs = map[string]bool{}
		)
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := c.Send(as("alice"), &messagesv1.SendRequest{ToAgent: "bob", Message: "same time"})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				if !res.GetDuplicateSuppressed() {
					stored++
				}
				messageIDs[res.GetMessage().GetId()] = true
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			t.Fatalf("concurrent sends failed: %v", errs)
		}
		if stored != 1 || len(messageIDs) != 1 {
			t.Errorf("%d sends reported stored, %d distinct messages returned; want exactly 1 and 1", stored, len(messageIDs))
		}
		if got := inbox(t, c, "bob"); len(got) != 1 {
			t.Errorf("bob has %d messages, want 1", len(got))
		}
	})
}

func TestIdempotencyKeyRule(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		servertest.KeyRule(t, as("alice"), "k1", func(ctx context.Context, variant int) (string, error) {
			// Past the dedup window, only the key prevents a second copy.
			clk.Set(clk.Now().Add(time.Hour))
			res, err := c.Send(ctx, &messagesv1.SendRequest{ToAgent: "bob", Message: fmt.Sprintf("message %d", variant)})
			if res.GetDuplicateSuppressed() {
				t.Errorf("send under key k1 answered as a suppressed duplicate")
			}
			return res.GetMessage().GetId(), err
		})
		if got := inbox(t, c, "bob"); len(got) != 1 {
			t.Errorf("bob has %d messages after retries, want 1", len(got))
		}
	})
}

func TestValidationFailuresCarryFieldViolations(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		ctx := as("alice")
		cases := []struct {
			name string
			req  proto.Message
			want map[string][]string
		}{
			{"missing recipient", &messagesv1.SendRequest{Message: "x"}, map[string][]string{"to_agent": {"required"}}},
			{"malformed recipient", &messagesv1.SendRequest{ToAgent: "Bob Smith", Message: "x"}, map[string][]string{"to_agent": {"string.pattern"}}},
			{"empty message", &messagesv1.SendRequest{ToAgent: "bob"}, map[string][]string{"message": {"required"}}},
			{"blank message", &messagesv1.SendRequest{ToAgent: "bob", Message: " \n\t "}, map[string][]string{"message": {"string.non_blank"}}},
			{"message over 10000 characters", &messagesv1.SendRequest{ToAgent: "bob", Message: strings.Repeat("m", 10001)}, map[string][]string{"message": {"string.max_len"}}},
			{"malformed thread", &messagesv1.SendRequest{ToAgent: "bob", Message: "x", ThreadId: "thread-1"}, map[string][]string{"thread_id": {"string.pattern"}}},
			{"malformed thread on list", &messagesv1.ListRequest{ThreadId: "msg_00000000000000000000000000"}, map[string][]string{"thread_id": {"string.pattern"}}},
			{"limit over the bound", &messagesv1.ListRequest{Limit: 201}, map[string][]string{"limit": {"int32.gte_lte"}}},
			{"negative offset", &messagesv1.ListRequest{Offset: -1}, map[string][]string{"offset": {"int32.gte_lte"}}},
		}
		for _, tc := range cases {
			var err error
			switch r := tc.req.(type) {
			case *messagesv1.SendRequest:
				_, err = c.Send(ctx, r)
			case *messagesv1.ListRequest:
				_, err = c.List(ctx, r)
			}
			if diff := cmp.Diff(tc.want, servertest.Violations(t, err)); diff != "" {
				t.Errorf("%s: violations (-want +got):\n%s", tc.name, diff)
			}
		}
		if got := inbox(t, c, "bob"); len(got) != 0 {
			t.Errorf("rejected requests stored %d messages", len(got))
		}
	})
}

func TestCallWithoutIdentityIsUnauthenticated(t *testing.T) {
	eachProtocol(t, func(t *testing.T, c messagesv1connect.MessagesServiceClient, clk *clock) {
		if _, err := c.Send(context.Background(), &messagesv1.SendRequest{ToAgent: "bob", Message: "x"}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("Send: code %v, want unauthenticated", connect.CodeOf(err))
		}
		if _, err := c.List(context.Background(), &messagesv1.ListRequest{}); servertest.Code(t, err) != connect.CodeUnauthenticated {
			t.Errorf("List: code %v, want unauthenticated", connect.CodeOf(err))
		}
	})
}

func TestServesREST(t *testing.T) {
	srv := start(t, &clock{t: t0})
	do := func(method, path, agent, depth, body string) (int, string) {
		caller := mesh.Caller{Subject: agent, Agent: agent}
		if depth != "" {
			caller.Depth, _ = strconv.Atoi(depth)
		}
		return srv.REST(t, servertest.BearerFor(caller), method, path, body)
	}
	if code, out := do(http.MethodPost, "/v1/messages", "alice", "", `{"to_agent":"bob","message":"over REST"}`); code != http.StatusOK || !strings.Contains(out, `"text":"over REST"`) {
		t.Errorf("POST /v1/messages = %d %s, want 200 with the message", code, out)
	}
	if code, out := do(http.MethodPost, "/v1/messages", "alice", "3", `{"to_agent":"bob","message":"deep"}`); code != http.StatusBadRequest || !strings.Contains(out, "invocation depth 3 exceeds maximum of 3") {
		t.Errorf("POST /v1/messages at depth 3 = %d %s, want 400 with the depth message", code, out)
	}
	if code, out := do(http.MethodGet, "/v1/messages", "bob", "", ""); code != http.StatusOK || !strings.Contains(out, `"from_agent":"alice"`) {
		t.Errorf("GET /v1/messages = %d %s, want 200 with bob's inbox", code, out)
	}
}
