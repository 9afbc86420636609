//go:build faults

package faults

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/toolmesh/toolmesh/edge"
)

// taskClient is a 2026-07-28 client that follows MCP tasks (the Tasks
// extension), over raw HTTP: the go-sdk has no tasks. It times every
// request (the server's answer, not the client's pauses).
type taskClient struct {
	url  string
	http *http.Client
	// clock keeps the longest answer.
	clock *answerClock
}

// taskReply is a JSON-RPC reply of the edge.
type taskReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// wireTask is a task, or a tool result, as the extension shows it.
type wireTask struct {
	ResultType        string                     `json:"resultType"`
	TaskID            string                     `json:"taskId"`
	Status            string                     `json:"status"`
	InputRequests     map[string]json.RawMessage `json:"inputRequests"`
	IsError           bool                       `json:"isError"`
	StructuredContent json.RawMessage            `json:"structuredContent"`
	Result            *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
}

func (w wireTask) terminal() bool {
	return w.Status == "completed" || w.Status == "failed" || w.Status == "cancelled"
}

// send sends one request (name: Mcp-Name) with the client's capabilities
// and the idempotency key key ("" for none).
func (c *taskClient) send(method, name string, params map[string]any, key string) (wireTask, *taskReply, error) {
	meta := map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28",
		"io.modelcontextprotocol/clientCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}},
			"extensions": map[string]any{edge.ExtensionTasks: map[string]any{}}}}
	if key != "" {
		meta[edge.MetaIdempotencyKey] = key
	}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return wireTask{}, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	c.clock.mark(time.Now(), false)
	res, err := c.http.Do(req)
	var raw []byte
	if err == nil {
		raw, err = io.ReadAll(res.Body)
		res.Body.Close()
	}
	c.clock.mark(time.Now(), true)
	if err != nil {
		return wireTask{}, nil, err
	}
	msg := raw
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				msg = []byte(data)
			}
		}
	}
	var r taskReply
	if err := json.Unmarshal(msg, &r); err != nil {
		return wireTask{}, nil, fmt.Errorf("%s answered %d %q", method, res.StatusCode, raw)
	}
	var w wireTask
	if r.Error == nil {
		_ = json.Unmarshal(r.Result, &w)
	}
	return w, &r, nil
}

// grantAsTask makes credits_grant an MCP task waiting for its confirmation
// (tools/call), confirms it (tasks/update) and follows it to its end
// (tasks/get), retrying what answered nothing useful with the same keys,
// for at most budget. The outcome's envelope is the task's result.
func (c *taskClient) grantAsTask(args map[string]any, ref string, budget time.Duration) (o outcome, requests, retried int) {
	o = outcome{tool: "credits_grant", key: ref, start: time.Now()}
	defer func() { o.end = time.Now() }()
	deadline := time.Now().Add(budget)
	pause := func() bool { time.Sleep(500 * time.Millisecond); return time.Now().Before(deadline) }
	fail := func(format string, a ...any) (outcome, int, int) {
		o.err = fmt.Errorf(format, a...)
		return o, requests, retried
	}
	var task wireTask
	for {
		w, r, err := c.send("tools/call", "credits_grant", map[string]any{"name": "credits_grant", "arguments": args}, ref)
		requests++
		if err == nil && r.Error == nil && w.ResultType == "task" {
			task = w
			break
		}
		if err == nil && r.Error == nil && w.ResultType == "complete" {
			var env envelope
			_ = json.Unmarshal(w.StructuredContent, &env)
			if env.DomainCode != "unavailable" {
				o.env = env
				return o, requests, retried
			}
		}
		retried++
		if !pause() {
			return fail("tools/call: no task within %s: %v %+v", budget, err, r)
		}
	}
	answered := false
	for {
		w, r, err := c.send("tasks/get", task.TaskID, map[string]any{"taskId": task.TaskID}, "")
		requests++
		switch {
		case err != nil || r.Error != nil:
			retried++
		case w.terminal():
			if w.Result == nil {
				return fail("task %s ended %s without a result", task.TaskID, w.Status)
			}
			if err := json.Unmarshal(w.Result.StructuredContent, &o.env); err != nil {
				return fail("task %s: result without an envelope", task.TaskID)
			}
			return o, requests, retried
		case w.Status == "input_required" && len(w.InputRequests) > 0 && !answered:
			responses := map[string]any{}
			for k := range w.InputRequests {
				responses[k] = map[string]any{"action": "accept", "content": map[string]any{"confirm": true, "reason": "fault suite"}}
			}
			_, ur, uerr := c.send("tasks/update", task.TaskID, map[string]any{"taskId": task.TaskID, "inputResponses": responses}, ref+"-answer")
			requests++
			// A refusal (-32602) of a retried answer means it was taken
			// before: the task is followed either way.
			answered = uerr == nil && (ur.Error == nil || ur.Error.Code == -32602)
			if !answered {
				retried++
			}
		}
		if !pause() {
			return fail("task %s not over within %s", task.TaskID, budget)
		}
	}
}
