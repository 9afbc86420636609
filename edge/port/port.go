// Package port holds the small interfaces and value types through which
// the edge's doors reach its core. The root package (edge) implements
// them; a door (edge/mcpdoor, edge/a2adoor, edge/elicit) imports this
// package, edge/identity and edge/httpguard, never the root and never
// another door, so that each protocol can be rewritten on its own.
//
// The one path of every tool call is the Pipeline: a door hands it a Call
// (the tool, the caller, the arguments and what the door can do for the
// call meanwhile: report progress, ask the user) and gets the call's
// Outcome, an envelope.
//
//	tool, _ := pipeline.Lookup("tasks_get")
//	out := pipeline.Call(ctx, &port.Call{Tool: tool, Caller: p, Arguments: args})
//	fmt.Println(out.Envelope.Status)
package port

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// ModernProtocol is the first MCP protocol version served statelessly;
// its clients get elicitation questions as input_required results.
const ModernProtocol = "2026-07-28"

// Tool is a tool of the edge's registry, bound to its service.
type Tool interface {
	// Binding decodes, validates and invokes the tool.
	Binding() *toolcall.Binding
}

// Catalog is t's catalog entry: name, kind, schemas, options.
func Catalog(t Tool) *toolcatalog.Tool { return t.Binding().Tool() }

// Pipeline runs tool calls: every step a call takes, in order — identity,
// grants, limits, guardrails, decoding and validation, the service call,
// the envelope, the audit record — whichever door it came through.
type Pipeline interface {
	// Tools are the tools, sorted by name.
	Tools() []Tool
	// Lookup finds a tool by name.
	Lookup(name string) (Tool, bool)
	// Call runs one call and returns its outcome; it never fails: every
	// refusal and error is an envelope.
	Call(ctx context.Context, c *Call) Outcome
	// ReadOnly reports whether WRITE and ADMIN tools are refused.
	ReadOnly() bool
	// Toolsets are the groups the tools form (toolcatalog.Toolset), sorted
	// by name.
	Toolsets() []*toolcatalog.Toolset
}

// Call is one tool call as a door hands it to the pipeline.
type Call struct {
	Tool Tool
	// Caller is the authenticated caller; nil is refused (unauthenticated).
	Caller *identity.Principal
	// Arguments are the call's arguments as the client sent them.
	Arguments json.RawMessage
	// Meta is the request's _meta: the client's idempotency key, the
	// message the call is made on behalf of, trace context.
	Meta map[string]any
	// Header is the HTTP request's header (trace context when Meta has
	// none); nil over stdio.
	Header http.Header
	// Elicitation is what the call's client can do about questions (see
	// Elicitor): be asked them, and answer a round of them; nil for a
	// caller that can do neither (the edge's own reads, A2A).
	Elicitation *Elicitation
	// Progress, when set, hears that the call is still running — unless its
	// tool streams: such a tool reports its own progress to Events.
	Progress Progress
	// Events, when set, hears the events a streaming tool reports while it
	// runs (progress, log messages), in order.
	Events toolcall.Events
	// NoWait asks a long-running tool that waits for its outcome to answer
	// at once: the door makes the work a task its client follows.
	NoWait bool
	// Tasks says that the client follows MCP tasks: a call that may become
	// one (toolmesh.tool.v1 TaskSupport), or that waits for the user's
	// answers once its input is complete, does, and its outcome is the task.
	Tasks bool
	// Unmetered marks the edge's own background reads (a subscription's
	// poll): they are not the caller's calls and do not count against its
	// rate limit.
	Unmetered bool
}

// Outcome is what a call answers: its envelope, or — for a call that goes
// on — a round of questions or the task it became.
type Outcome struct {
	Envelope *toolcall.Envelope
	// Round is the round of questions the call asks before it goes on
	// (Elicitation without Ask): the client calls again with the answers
	// and the round's state.
	Round *Round
	// Task is the MCP task the call became (Call.Tasks): the client follows
	// it with the task methods.
	Task *Task
	// Visit is a URL question the user accepted, over a session, whose
	// visit was still not done when the call could wait no longer: the
	// door answers the protocol's "URL elicitation required" so that the
	// client calls again once the visit is done.
	Visit *Question
	// Executed is set for a successful ADMIN call whose side effect ran
	// elsewhere (see Elicitor): the pipeline reports it executed.
	Executed *Executed
	// Notes, on an Outcome the Elicitor gives with ok false, are the
	// fallbacks the call took for questions its client could not answer:
	// the pipeline adds them to the call's result (toolcall.Envelope.Notes).
	Notes []string
}

// Progress reports that a call is still running, to a client that asked to
// hear it.
type Progress interface {
	// Start begins reporting for the call of tool; stop ends it.
	Start(ctx context.Context, tool *toolcatalog.Tool) (stop func())
}

// Counter counts work in flight that the edge must see finished before it
// stops (answers not yet written).
type Counter interface {
	Add(delta int64)
}

// Request _meta keys the pipeline reads.
const (
	// MetaIdempotencyKey is the key a client may set to make a retried
	// call apply once; without it every call gets a fresh key.
	MetaIdempotencyKey = "dev.toolmesh/idempotencyKey"
	// MetaOnBehalfOf names the message a call is made on behalf of: the
	// call runs one level deeper than whoever sent it.
	MetaOnBehalfOf = "dev.toolmesh/onBehalfOf"
)

// CardExtensions gives the A2A door the extensions of an agent's card: one
// for each READ tool with a card_extension option (toolmesh.tool.v1
// CardExtension) that answers for the agent.
type CardExtensions interface {
	// CardExtensions calls each such tool as the mesh itself, with the
	// agent's id in the option's agent_field, and returns the extensions of
	// those that answered ok, in tool name order. It never fails: a tool
	// that answers not_found is left off, and one that fails is left off
	// and logged, so the card is served either way.
	CardExtensions(ctx context.Context, agent string) []CardExtension
}

// CardExtension is one extension of an agent's A2A card.
type CardExtension struct {
	// URI and Description are the option's.
	URI, Description string
	// Params is the tool's data for the agent.
	Params map[string]any
}
