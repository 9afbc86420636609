package mcpdoor

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
)

// Status pushes (2026-07-28): a subscriptions/listen whose notifications
// name taskIds is served here, not by the SDK (go-sdk v1.8 knows no task
// subscriptions and sends no custom notifications). The stream acknowledges
// the caller's own tasks among them, then sends notifications/tasks — the
// task as tasks/get shows it — once for each at once and again whenever one
// changes (read every pollIntervalMs), and answers the listen once every
// one is over. The listening
// replica reads the tasks where their state is (Temporal, the stores), so
// it sees changes made through any replica.

// methodNotifyTasks is the task status notification.
const methodNotifyTasks = "notifications/tasks"

// listenParams are a subscriptions/listen's params, as far as tasks go.
type listenParams struct {
	Meta          map[string]any `json:"_meta"`
	Notifications struct {
		TaskIDs []string `json:"taskIds"`
	} `json:"notifications"`
}

// taskListen reads a 2026-07-28 subscriptions/listen body: its params
// when it watches tasks, nil otherwise (the SDK serves it).
func taskListen(body []byte) *listenParams {
	var msg struct {
		Params *listenParams `json:"params"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Params == nil || len(msg.Params.Notifications.TaskIDs) == 0 {
		return nil
	}
	return msg.Params
}

// declaresTasksIn reports whether a request's _meta declares the Tasks
// extension among its client capabilities.
func declaresTasksIn(meta map[string]any) bool {
	caps, _ := meta[mcp.MetaKeyClientCapabilities].(map[string]any)
	ext, _ := caps["extensions"].(map[string]any)
	_, ok := ext[ExtensionTasks]
	return ok
}

// listenTasks serves a subscriptions/listen that watches tasks until they
// are all over, the client goes, or the edge stops.
func (tf *taskFeature) listenTasks(w http.ResponseWriter, r *http.Request, id json.RawMessage, params *listenParams, p *identity.Principal) {
	if !declaresTasksIn(params.Meta) {
		httpguard.WriteRPCError(w, http.StatusBadRequest, id, codeMissingCapability, "Missing required client capability",
			map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{ExtensionTasks: map[string]any{}}}})
		return
	}
	if p == nil {
		httpguard.WriteRPCError(w, http.StatusUnauthorized, id, httpguard.CodeInvalidRequest, "unauthenticated", nil)
		return
	}
	// A listen answers no call: the edge's shutdown does not wait for it
	// (serveMCP counted it), CloseSessions ends it.
	tf.answers.Add(-1)
	defer tf.answers.Add(1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-tf.closing:
			cancel()
		case <-ctx.Done():
		}
	}()

	// The caller's own tasks; another's, like an unknown one, is left out.
	watched := map[string][sha256.Size]byte{}
	var honoured []string
	var first []*port.Task
	for _, tid := range params.Notifications.TaskIDs {
		if _, dup := watched[tid]; dup {
			continue
		}
		t, err := tf.task(ctx, p, tid, false)
		if err != nil {
			continue
		}
		watched[tid] = [sha256.Size]byte{}
		honoured = append(honoured, tid)
		first = append(first, t)
	}
	subscription := map[string]any{mcp.MetaKeySubscriptionID: id}

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(msg any) bool {
		b, err := json.Marshal(msg)
		if err == nil {
			_, err = fmt.Fprintf(w, "event: message\ndata: %s\n\n", b)
		}
		if flusher != nil {
			flusher.Flush()
		}
		return err == nil
	}
	notify := func(method string, params any) bool {
		return send(map[string]any{"jsonrpc": "2.0", "method": method, "params": params})
	}
	if !notify("notifications/subscriptions/acknowledged", map[string]any{
		"notifications": map[string]any{"taskIds": append([]string{}, honoured...)}, "_meta": subscription}) {
		return
	}
	tf.log.DebugContext(ctx, "mcp.task_listen", "tasks", len(honoured), "subject", p.Subject, "agent", p.Agent)

	// pushed sends t when it changed since it was last sent, and reports
	// whether it is over.
	pushed := func(t *port.Task) (over, ok bool) {
		wire := detailedTask(t, "")
		wire.Meta = subscription
		b, _ := json.Marshal(wire)
		sum := sha256.Sum256(b)
		if watched[t.ID] != sum {
			watched[t.ID] = sum
			if !notify(methodNotifyTasks, wire) {
				return false, false
			}
		}
		return port.Terminal(t.Status), true
	}
	open := map[string]bool{}
	for _, t := range first {
		over, ok := pushed(t)
		if !ok {
			return
		}
		if !over {
			open[t.ID] = true
		}
	}
	tick := time.NewTicker(taskPollInterval)
	defer tick.Stop()
	for len(open) > 0 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for tid := range open {
			t, err := tf.task(ctx, p, tid, false)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// Unreadable for now (Temporal busy): read again next time.
				tf.log.InfoContext(ctx, "mcp.task_listen_unreadable", "task_id", tid, "error", err)
				continue
			}
			over, ok := pushed(t)
			if !ok {
				return
			}
			if over {
				delete(open, tid)
			}
		}
	}
	send(map[string]any{"jsonrpc": "2.0", "id": id, "result": map[string]any{"resultType": "complete", "_meta": subscription}})
}
