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

// Elicitation is what a door's client can do about the questions of an
// elicited call.
type Elicitation struct {
	// CanAsk reports that the client declared it can be asked (MCP form
	// elicitation).
	CanAsk bool
	// State is the state of the round the call answers, as the client
	// returned it (Round.State); "" for a call that answers none.
	State string
	// Answers are the client's answers to that round, by question key;
	// those it did not give as answers to a form are left out.
	Answers map[string]Answer
	// Ask, when set, asks one question within the call and waits for its
	// answer (a session of MCP's 2025 era): every round is asked so, and
	// the call answers once, at its end. Without it a round's questions
	// are the call's outcome (Outcome.Round).
	Ask func(ctx context.Context, q Question) (Answer, error)
}

// Question is one question of an elicited call or a task: a form for the
// user to fill in.
type Question struct {
	// Key names the question; its answer comes back under it.
	Key string
	// Message says what is asked, for people.
	Message string
	// Schema is the form: a JSON Schema object of flat, primitive
	// properties.
	Schema json.RawMessage
}

// Answer is the user's answer to a Question.
type Answer struct {
	// Action is AnswerAccept, AnswerDecline or AnswerCancel; anything else
	// is no answer.
	Action string
	// Content is what the user gave, with AnswerAccept.
	Content map[string]any
}

// Actions of an Answer.
const (
	AnswerAccept  = "accept"
	AnswerDecline = "decline"
	AnswerCancel  = "cancel"
)

// Round is a round of questions a call asks before it goes on.
type Round struct {
	Questions []Question
	// State is the round's sealed state, which the client returns with its
	// answers (Elicitation.State).
	State string
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
