package port

import (
	"context"
	"encoding/json"
)

// Elicitor asks the user — over as many rounds as a call needs — for what
// the call lacks, instead of refusing it (edge/elicit). The pipeline hands
// it a call at the guardrails step.
type Elicitor interface {
	// CanAsk reports whether the client of c can be asked (it declared
	// form elicitation).
	CanAsk(c *Call) bool
	// Ask starts asking for what the call lacks when the user can give it:
	// ok is false when the call lacks nothing that can be asked, and goes
	// on as usual.
	Ask(ctx context.Context, c *Elicited, args map[string]json.RawMessage) (out Outcome, ok bool)
	// Next delivers the answers of a later round (the request carries the
	// requestState of the round it answers).
	Next(ctx context.Context, c *Elicited) Outcome
	// Carry makes c, a call whose input is complete and valid, an MCP task
	// carried by a workflow, and answers with the task at once.
	Carry(ctx context.Context, c *Elicited) Outcome
}

// Elicited is one call an Elicitor serves.
type Elicited struct {
	*Call
	// Depth is the invocation depth the call runs at.
	Depth int
	// ClientKey is the client's idempotency key ("" for none).
	ClientKey string
}

// Executed is a successful ADMIN call whose side effect ran elsewhere (the
// calls worker, after its questions were answered): the pipeline reports
// it as executed, the record already written.
type Executed struct {
	// Reason is the reason the user gave.
	Reason string
	// CallID is the idempotency key the side effect ran and was recorded
	// under.
	CallID string
}
