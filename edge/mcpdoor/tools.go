package mcpdoor

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// toolFeature serves the tools: a tools/call, and a call the door makes
// itself (a resource read, a prompt, a completion), through the pipeline.
type toolFeature struct {
	tools    map[string]*tool
	pipeline port.Pipeline
	resolve  *resolver
	// tasks are the kinds of MCP tasks and taskf serves them; nil
	// without tasks.
	tasks *tasks
	taskf *taskFeature
	// progressInterval is how often a call that asked for progress hears
	// that it still runs.
	progressInterval time.Duration
}

// toolHandler answers every call to t with exactly one result, whatever
// happens underneath: the pipeline's envelope, an elicitation round, or —
// for a Tasks client whose work is still running — a task.
func (tc *toolFeature) toolHandler(t *tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		slot := taskSlotFrom(ctx)
		c := port.Call{
			Tool:        t.Tool,
			Caller:      tc.resolve.principal(req),
			Arguments:   req.Params.Arguments,
			Meta:        req.Params.Meta,
			Elicitation: elicitationOf(ctx, req),
			NoWait:      slot != nil && tc.tasks.starts(t.catalog.Name),
			Tasks:       slot != nil,
		}
		if x := req.GetExtra(); x != nil {
			c.Header = x.Header
		}
		if pr := tc.progressOf(req); pr != nil {
			c.Progress = pr
		}
		if t.catalog.EventField != nil {
			c.Events = eventsOf(ctx, req)
		}
		out := tc.pipeline.Call(ctx, &c)
		if out.Round != nil {
			return roundResult(out.Round), nil
		}
		if q := out.Visit; q != nil {
			// The user accepted to visit a page that is not visited yet: the
			// client calls again once it is (2025-11-25).
			return nil, mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", ElicitationID: q.ElicitationID, URL: q.URL, Message: q.Message}})
		}
		if out.Task != nil {
			// taskMiddleware answers with the task.
			slot.task = out.Task
			return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
		}
		env := out.Envelope
		if err := clientGapError(req, env); err != nil {
			return nil, err
		}
		if req.Params.RequestState != "" && req.ProtocolVersion() >= ModernProtocol && stateRefused(env) {
			// At 2026-07-28 a requestState that fails its checks is a
			// protocol error, not a tool's answer: the client must start
			// over rather than read a result (SEP-2322).
			return nil, stateError(env)
		}
		if slot != nil && tc.tasks.starts(t.catalog.Name) {
			slot.task = tc.taskf.started(ctx, t.catalog, env)
		}
		if env.IsError() && req.Session != nil {
			//lint:ignore SA1019 MCP logging is deprecated from 2026-07-28 on, but 2025-era clients that set a level still get a message per failed call
			_ = req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Logger: "toolmesh.edge",
				Data: map[string]string{"tool": t.catalog.Name, "domain_code": env.DomainCode, "message": env.Message}})
		}
		return toolResult(t.catalog, env), nil
	}
}

// progress tells a client that asked for progress that a call is still
// running, every ProgressInterval, so it can keep waiting. A long-running
// tool also reports its start.
type progress struct {
	req      *mcp.CallToolRequest
	token    any
	interval time.Duration
}

// progressOf is the progress of req's call; nil when its client did not
// ask for it.
func (tc *toolFeature) progressOf(req *mcp.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return nil
	}
	return &progress{req: req, token: token, interval: tc.progressInterval}
}

func (pr *progress) Start(ctx context.Context, t *toolcatalog.Tool) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		n := 0
		notify := func(msg string) {
			n++
			_ = pr.req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: pr.token, Progress: float64(n), Message: msg})
		}
		if t.LongRunning {
			notify(t.Title + ": started")
		}
		tick := time.NewTicker(pr.interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				notify(t.Title + ": still running")
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// callAs calls t as p with args, through the pipeline every tools/call
// takes, and returns its envelope. extra carries the request's HTTP headers
// and token, as a tools/call's would (nil for the edge's own background
// reads).
func (tc *toolFeature) callAs(ctx context.Context, t *tool, p *identity.Principal, extra *mcp.RequestExtra, args map[string]any) *toolcall.Envelope {
	raw, err := json.Marshal(args)
	if err != nil {
		return toolcall.Fail(t.catalog.Name, toolcall.CodeInternal, "encode arguments")
	}
	c := port.Call{Tool: t.Tool, Caller: p, Arguments: raw, Unmetered: ctx.Value(unmeteredKey{}) != nil}
	if extra != nil {
		c.Header = extra.Header
	}
	out := tc.pipeline.Call(ctx, &c)
	if out.Round != nil {
		// Only calls that ask the user something go on; the READ tools
		// behind resources, prompts and completion do not.
		return toolcall.Fail(t.catalog.Name, toolcall.CodeInternal, "the call did not finish")
	}
	return out.Envelope
}

// unmeteredKey marks the context of the edge's own background reads.
type unmeteredKey struct{}
