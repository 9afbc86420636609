package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/testsupport/mcpevents"
)

// eventPoller follows some event types through one edge with our own
// client, from cursors it keeps, and counts what it sees by event id.
type eventPoller struct {
	t       *testing.T
	c       *mcpevents.Client
	cursors map[string]string
	// seen counts each event id; got holds the events by name.
	seen map[string]int
	got  map[string][]mcpevents.Occurrence
}

// startPolling polls each of names once from now and keeps the cursors.
func startPolling(t *testing.T, url string, names ...string) *eventPoller {
	t.Helper()
	p := &eventPoller{t: t, c: &mcpevents.Client{URL: url}, cursors: map[string]string{}, seen: map[string]int{}, got: map[string][]mcpevents.Occurrence{}}
	for _, n := range names {
		res, err := p.c.Poll(t.Context(), mcpevents.PollParams{Name: n})
		if err != nil {
			t.Fatalf("poll %s from now: %v", n, err)
		}
		if len(res.Events) != 0 || res.Cursor == "" || res.HasMore || res.NextPollMs < 1000 {
			t.Fatalf("poll %s from now = %+v; want no events, a cursor, and a time to poll again", n, res)
		}
		p.cursors[n] = res.Cursor
	}
	return p
}

// pollAll polls every type until it has read everything there is.
func (p *eventPoller) pollAll() {
	p.t.Helper()
	for _, n := range slices.Sorted(maps.Keys(p.cursors)) {
		for {
			cur := p.cursors[n]
			res, err := p.c.Poll(p.t.Context(), mcpevents.PollParams{Name: n, Cursor: &cur})
			if err != nil {
				p.t.Fatalf("poll %s: %v", n, err)
			}
			if res.Truncated {
				p.t.Errorf("poll %s: truncated", n)
			}
			for _, e := range res.Events {
				p.seen[e.EventID]++
				p.got[n] = append(p.got[n], e)
			}
			p.cursors[n] = res.Cursor
			if !res.HasMore {
				break
			}
		}
	}
}

// waitFor polls until name has an event whose data has field = value.
func (p *eventPoller) waitFor(name, field, value string) mcpevents.Occurrence {
	p.t.Helper()
	var found mcpevents.Occurrence
	eventually(p.t, time.Minute, name+" with "+field+" "+value, func() bool {
		p.pollAll()
		for _, e := range p.got[name] {
			var data map[string]any
			if json.Unmarshal(e.Data, &data) == nil && data[field] == value {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// TestEventsPollThroughUp: against the processes of `toolmesh up`, a
// client lists the event types and polls them; an agent asks, the owner
// answers, a work task changes status, and the poll sees each event once.
// The edge is then killed; polling resumes from the cursor on a second
// edge replica and sees what happened meanwhile, nothing lost, nothing
// twice.
func TestEventsPollThroughUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole mesh")
	}
	bin, temporal := meshBinaries(t)
	m := startUp(t, bin, temporal)
	url := m.Link(t, linkMCP)

	types, err := (&mcpevents.Client{URL: url}).List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ty := range types {
		names = append(names, ty.Name)
		if !slices.Contains(ty.Delivery, "poll") || len(ty.InputSchema) == 0 || len(ty.PayloadSchema) == 0 {
			t.Errorf("event type %s: delivery %v, schemas %s / %s", ty.Name, ty.Delivery, ty.InputSchema, ty.PayloadSchema)
		}
	}
	want := []string{"ask.answered", "ask.cancelled", "ask.created", "ask.expired", "work_task.status_changed"}
	if !slices.Equal(names, want) {
		t.Fatalf("events/list = %v, want %v", names, want)
	}

	p := startPolling(t, url, "ask.created", "ask.answered", "work_task.status_changed")
	s := mcpSessionTo(t, url)
	var asked struct {
		Ask struct {
			AskID string `json:"ask_id"`
		} `json:"ask"`
	}
	okData(t, callTool(t, s, "owner_ask", map[string]any{"question": "Ship the events?", "options": []string{"yes", "no"}, "wait_seconds": 0}), &asked)
	okData(t, callTool(t, s, "owner_answer", map[string]any{"ask_id": asked.Ask.AskID, "answer": "yes"}), &struct{}{})
	var task struct {
		Task struct {
			ID string `json:"id"`
		} `json:"task"`
	}
	okData(t, callTool(t, s, "tasks_create", map[string]any{"description": "Announce the events"}), &task)
	okData(t, callTool(t, s, "tasks_update_status", map[string]any{"task_id": task.Task.ID, "status": "TASK_STATUS_RUNNING"}), &struct{}{})

	p.waitFor("ask.created", "ask_id", asked.Ask.AskID)
	answered := p.waitFor("ask.answered", "ask_id", asked.Ask.AskID)
	p.waitFor("work_task.status_changed", "task_id", task.Task.ID)
	var data struct {
		Ask struct {
			Answer string `json:"answer"`
			Status string `json:"status"`
		} `json:"ask"`
	}
	if err := json.Unmarshal(answered.Data, &data); err != nil || data.Ask.Answer != "yes" || data.Ask.Status != "ASK_STATUS_ANSWERED" {
		t.Errorf("ask.answered data = %s, want the answered ask", answered.Data)
	}
	p.pollAll()
	for id, n := range p.seen {
		if n != 1 {
			t.Errorf("event %s seen %d times", id, n)
		}
	}
	if got := len(p.seen); got != 3 {
		t.Errorf("%d events seen, want 3: %v", got, p.got)
	}

	// The first edge dies; the task moves on meanwhile, through a second
	// edge replica, which the poll resumes on from its cursor.
	mcp2, _ := secondEdge(t, bin, temporal, m)
	pid, _, _ := processPID(t, bin, m, procEdge)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s2 := mcpSessionTo(t, mcp2)
	okData(t, callTool(t, s2, "tasks_update_status", map[string]any{"task_id": task.Task.ID, "status": "TASK_STATUS_COMPLETED", "result": "announced"}), &struct{}{})
	p.c = &mcpevents.Client{URL: mcp2}
	done := p.waitFor("work_task.status_changed", "status", "TASK_STATUS_COMPLETED")
	p.pollAll()
	lost, twice := 0, 0
	for id, n := range p.seen {
		if n > 1 {
			twice++
			t.Errorf("event %s seen %d times", id, n)
		}
	}
	if len(p.seen) != 4 {
		lost = 4 - len(p.seen)
		t.Errorf("%d events seen across both edges, want 4: %v", len(p.seen), p.got)
	}
	t.Logf("poll resumed on a second edge after the first was killed: %d events, %d lost, %d twice (last %s)", len(p.seen), lost, twice, done.EventID)

	// A type nobody declared is not found; a malformed cursor is refused.
	bad := "not-a-cursor"
	_, err = p.c.Poll(context.Background(), mcpevents.PollParams{Name: "ask.created", Cursor: &bad})
	var rpcErr *mcpevents.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32602 {
		t.Errorf("poll with a malformed cursor: %v, want -32602", err)
	}
	_, err = p.c.Poll(context.Background(), mcpevents.PollParams{Name: "no.such_event"})
	if !errors.As(err, &rpcErr) || rpcErr.Code != -32023 {
		t.Errorf("poll of an unknown type: %v, want -32023", err)
	}
}
