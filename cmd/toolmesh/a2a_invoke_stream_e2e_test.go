package main

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/cmd/internal/cli"
	"github.com/toolmesh/toolmesh/internal/testsupport/a2atest"
)

// progressLog is what an MCP client heard while its calls ran: the
// progress notifications of each progress token, in order.
type progressLog struct {
	mu sync.Mutex
	by map[string][]string
}

func (l *progressLog) handle(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tok, _ := req.Params.ProgressToken.(string)
	l.by[tok] = append(l.by[tok], req.Params.Message)
}

// steps are the notifications of token, without the reports that the
// remote agent is still working.
func (l *progressLog) steps(token string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, m := range l.by[token] {
		if m != "The remote agent is still working on it." {
			out = append(out, m)
		}
	}
	return out
}

// until waits until token's notifications end with want.
func (l *progressLog) until(t *testing.T, token, want string) {
	t.Helper()
	eventually(t, time.Minute, "progress "+want, func() bool {
		s := l.steps(token)
		return len(s) > 0 && s[len(s)-1] == want
	})
}

// invokeWithProgress calls remoteagents_invoke with a progress token in a
// goroutine; the envelope comes on the channel.
func invokeWithProgress(t *testing.T, s *mcp.ClientSession, token, url, text string) <-chan envelope {
	t.Helper()
	out := make(chan envelope, 1)
	params := &mcp.CallToolParams{Name: "remoteagents_invoke", Arguments: map[string]any{"url": url, "message": text}}
	params.SetProgressToken(token)
	go func() {
		env, err := tryCallTool(s, params)
		if err != nil {
			t.Error(err)
		}
		out <- env
	}()
	return out
}

type streamedInvocation struct {
	Invocation struct {
		InvocationID string `json:"invocation_id"`
		Status       string `json:"status"`
		Answer       string `json:"answer"`
		Progress     string `json:"progress"`
		TaskID       string `json:"task_id"`
	}
}

// TestRemoteAgentProgressReachesTheMCPCaller: a remote A2A agent that
// streams (a2a-go/v2's server in the test) reports three steps before it
// answers. Invoked through the edge by an MCP client with a progress
// token, every step reaches the client as a progress notification, in
// order, then the result. Killing the remoteagents worker (kill -9) in the
// middle of a second invocation's stream still ends in one result, with
// the message sent once and no step reported twice. A client that takes
// MCP tasks gets the invocation as a task whose tasks/get shows the latest
// step and whose tasks/cancel cancels the remote task. An agent that does
// not stream is polled as before.
func TestRemoteAgentProgressReachesTheMCPCaller(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal, cli.RemoteEgressAllowEnv+"=127.0.0.1")
	steps := []string{"Searching flights.", "Found 3 flights.", "Holding seat 12A."}
	agent := a2atest.NewProgressAgent(steps...)
	base := a2atest.Serve(t, agent, true)
	log := &progressLog{by: map[string][]string{}}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "a2a-progress-e2e", Version: "1"}, &mcp.ClientOptions{ProgressNotificationHandler: log.handle}).
		Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: m.Link(t, linkMCP)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	artifact := a2atest.ArtifactName + ": " + a2atest.Answer
	want := []string{"The remote task is submitted.", steps[0], steps[1], steps[2], artifact, a2atest.Done}

	// Each step as the agent takes it, then the answer.
	res := invokeWithProgress(t, s, "first", base, "Book me a flight to Berlin.")
	log.until(t, "first", want[0])
	for i := range steps {
		agent.Step(1)
		log.until(t, "first", steps[i])
	}
	agent.Step(1)
	var first streamedInvocation
	okData(t, <-res, &first)
	if first.Invocation.Status != "INVOCATION_STATUS_COMPLETED" || first.Invocation.Answer != a2atest.Answer {
		t.Errorf("the first invocation = %+v, want completed with the itinerary", first.Invocation)
	}
	if got := log.steps("first"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("progress %q, want %q", got, want)
	}

	// The worker dies mid-stream; its restart resumes the stream.
	res = invokeWithProgress(t, s, "second", base, "Book me a flight to Köln.")
	log.until(t, "second", want[0])
	agent.Step(1)
	log.until(t, "second", steps[0])
	agent.Step(1)
	log.until(t, "second", steps[1])
	subscribed := agent.Subscriptions()
	pid, _, _ := processPID(t, bin, m, workerPrefix+"remoteagents")
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "the restarted worker resubscribed to the remote task", func() bool { return agent.Subscriptions() > subscribed })
	resumed := time.Since(killed)
	agent.Step(2)
	var second streamedInvocation
	okData(t, <-res, &second)
	waited := second.Invocation.Status == "INVOCATION_STATUS_COMPLETED"
	if !waited {
		// The call's wait ran out while the worker came back: the
		// invocation goes on, and ends once.
		if second.Invocation.Status != "INVOCATION_STATUS_WORKING" {
			t.Fatalf("the second invocation = %+v, want completed or still working", second.Invocation)
		}
		eventually(t, 2*time.Minute, "the second invocation completed", func() bool {
			okData(t, callTool(t, s, "remoteagents_get_invocation", map[string]any{"invocation_id": second.Invocation.InvocationID}), &second)
			return second.Invocation.Status != "INVOCATION_STATUS_WORKING"
		})
	}
	if second.Invocation.Status != "INVOCATION_STATUS_COMPLETED" || second.Invocation.Answer != a2atest.Answer {
		t.Errorf("the second invocation = %+v, want completed with the itinerary", second.Invocation)
	}
	if sent := agent.Executed(); len(sent) != 2 || sent[0] == sent[1] {
		t.Errorf("the agent was sent %v, want each invocation's message once", sent)
	}
	got := log.steps("second")
	if waited && strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("progress across the worker's kill %q, want %q", got, want)
	}
	if !waited && !strings.HasPrefix(strings.Join(want, "|"), strings.Join(got, "|")) {
		t.Errorf("progress across the worker's kill %q, want a beginning of %q", got, want)
	}
	t.Logf("remoteagents worker killed mid-stream: resubscribed %s later; the call %s; progress seen %d of %d, none twice",
		resumed.Round(100*time.Millisecond), map[bool]string{true: "waited for the answer", false: "returned working"}[waited], len(got), len(want))

	// A Tasks client: tasks/get shows the latest step, tasks/cancel
	// cancels the remote task.
	mcpURL := m.Link(t, linkMCP)
	created := rawTaskCall(t, mcpURL, "tools/call", map[string]any{"name": "remoteagents_invoke",
		"arguments": map[string]any{"url": base, "message": "Book me a flight to Paris."}})
	taskID, _ := created["taskId"].(string)
	if created["resultType"] != "task" || !strings.HasPrefix(taskID, "invoke/local/inv_") {
		t.Fatalf("remoteagents_invoke from a Tasks client = %v, want a task invoke/local/...", created)
	}
	eventually(t, time.Minute, "the remote task opened", func() bool { return len(agent.Executed()) == 3 })
	agent.Step(1)
	eventually(t, time.Minute, "tasks/get shows the latest step", func() bool {
		got := rawTaskCall(t, mcpURL, "tasks/get", map[string]any{"taskId": taskID})
		msg, _ := got["statusMessage"].(string)
		return got["status"] == "working" && strings.Contains(msg, steps[0])
	})
	rawTaskCall(t, mcpURL, "tasks/cancel", map[string]any{"taskId": taskID})
	eventually(t, time.Minute, "the invocation task cancelled", func() bool {
		return rawTaskCall(t, mcpURL, "tasks/get", map[string]any{"taskId": taskID})["status"] == "cancelled"
	})
	eventually(t, time.Minute, "the remote task cancelled", func() bool { return agent.Cancels() == 1 })

	// An agent that does not stream is polled: no step reaches the
	// caller, the answer does.
	quiet := a2atest.NewProgressAgent(steps...)
	quiet.Step(len(steps) + 1)
	res = invokeWithProgress(t, s, "polled", a2atest.Serve(t, quiet, false), "Book me a flight to Rome.")
	var polled streamedInvocation
	okData(t, <-res, &polled)
	if polled.Invocation.Status != "INVOCATION_STATUS_COMPLETED" || polled.Invocation.Answer != a2atest.Answer || quiet.Subscriptions() != 0 {
		t.Errorf("the polled invocation = %+v (%d subscriptions), want completed with the itinerary, never subscribed", polled.Invocation, quiet.Subscriptions())
	}
	if got := log.steps("polled"); len(got) != 0 {
		t.Errorf("progress %q from an agent that does not stream, want none", got)
	}

	checkInvocationExtended(t, s, steps)
}

// checkInvocationExtended: an invocation that expires 10 s after it starts
// (of an agent that does not stream: polled up to the expiry, no later),
// extended by its agent while the remote agent works, is still followed
// past those 10 s and completes with the answer; the extension is in the
// audit trail once, with its reason.
func checkInvocationExtended(t *testing.T, s *mcp.ClientSession, steps []string) {
	t.Helper()
	agent := a2atest.NewProgressAgent(steps...)
	base := a2atest.Serve(t, agent, false)
	env := callTool(t, s, "remoteagents_invoke", map[string]any{"url": base, "message": "Book me a flight to Oslo.", "timeout_seconds": 10, "wait_seconds": 0})
	var inv struct {
		Invocation struct {
			InvocationID string    `json:"invocation_id"`
			Status       string    `json:"status"`
			Answer       string    `json:"answer"`
			ExpireTime   time.Time `json:"expire_time"`
		} `json:"invocation"`
	}
	okData(t, env, &inv)
	eventually(t, time.Minute, "the remote task opened", func() bool { return len(agent.Executed()) == 1 })
	first := inv.Invocation.ExpireTime
	okData(t, callTool(t, s, "remoteagents_extend_invocation", map[string]any{"invocation_id": inv.Invocation.InvocationID,
		"extend_seconds": 120, "reason": "the airline answers slowly"}), &inv)
	if !inv.Invocation.ExpireTime.Equal(first.Add(2 * time.Minute)) {
		t.Fatalf("the extended invocation expires at %v, want 2 minutes after %v", inv.Invocation.ExpireTime, first)
	}
	// The deadline is the behaviour under test: the remote agent answers
	// only once the first expiry has passed.
	eventually(t, time.Minute, "the first expiry passed", func() bool { return time.Now().After(first.Add(2 * time.Second)) })
	agent.Step(len(steps) + 1)
	eventually(t, time.Minute, "the extended invocation completed", func() bool {
		okData(t, callTool(t, s, "remoteagents_get_invocation", map[string]any{"invocation_id": inv.Invocation.InvocationID}), &inv)
		return inv.Invocation.Status != "INVOCATION_STATUS_WORKING"
	})
	if inv.Invocation.Status != "INVOCATION_STATUS_COMPLETED" || inv.Invocation.Answer != a2atest.Answer {
		t.Errorf("the extended invocation = %+v, want completed with the itinerary after its first expiry", inv.Invocation)
	}
	var trail struct {
		Records []struct {
			Tool   string `json:"tool"`
			Reason string `json:"reason"`
		} `json:"records"`
	}
	eventually(t, time.Minute, "the extension audited", func() bool {
		okData(t, callTool(t, s, "audit_list", map[string]any{"tool": "remoteagents_extend_invocation"}), &trail)
		return len(trail.Records) > 0
	})
	if len(trail.Records) != 1 || trail.Records[0].Reason != "the airline answers slowly" {
		t.Errorf("audit records of the extension %+v, want one with its reason", trail.Records)
	}
}
