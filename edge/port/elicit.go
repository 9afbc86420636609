package port

import (
	"context"
	"encoding/json"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Elicitor asks the user — over as many rounds as a call needs — for what
// the call lacks, instead of refusing it (edge/elicit). The pipeline hands
// it a call at the guardrails step.
type Elicitor interface {
	// CanAsk reports whether the client of c can be asked anything (it
	// declared form or URL elicitation, sampling or roots).
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
	// Visit carries c, a call its service refused pending a visit
	// (c.Visit), from a client that can be sent to a page: the person is
	// asked to visit, and the call is made again, under c.Key, once they
	// accepted.
	Visit(ctx context.Context, c *Elicited) Outcome
}

// Elicitation is what a door's client can do about the questions of an
// elicited call.
type Elicitation struct {
	// CanAsk reports that the client declared it can be asked to fill in a
	// form (MCP form elicitation).
	CanAsk bool
	// URL, Sampling and Roots report that the client declared it can send
	// its user to a page (URL elicitation), ask its model for a completion
	// (sampling) and list its roots.
	URL, Sampling, Roots bool
	// State is the state of the round the call answers, as the client
	// returned it (Round.State); "" for a call that answers none.
	State string
	// Answers are the client's answers to that round, by question key;
	// responses the door could not read as answers are left out.
	Answers map[string]Answer
	// Ask, when set, asks one question within the call and waits for its
	// answer (a session of MCP's 2025 era): every round is asked so, and
	// the call answers once, at its end. Without it a round's questions
	// are the call's outcome (Outcome.Round).
	Ask func(ctx context.Context, q Question) (Answer, error)
	// Complete, with Ask, tells the client that the visit of a URL
	// question it asked (by its ElicitationID) is done (MCP
	// notifications/elicitation/complete).
	Complete func(ctx context.Context, elicitationID string)
}

// Offers reports whether the client can answer a question of kind k.
func (e *Elicitation) Offers(k QuestionKind) bool {
	if e == nil {
		return false
	}
	switch k {
	case QuestionURL:
		return e.URL
	case QuestionSampling:
		return e.Sampling
	case QuestionRoots:
		return e.Roots
	}
	return e.CanAsk
}

// QuestionKind is what a Question asks, and of whom.
type QuestionKind string

// Kinds of questions: the input requests a call can make of its client.
const (
	// QuestionForm is a form the user fills in (MCP elicitation, form
	// mode); the zero kind.
	QuestionForm QuestionKind = ""
	// QuestionURL sends the user to a page outside the client (MCP
	// elicitation, URL mode), e.g. to sign in somewhere.
	QuestionURL QuestionKind = "url"
	// QuestionSampling asks the client's model for a completion.
	QuestionSampling QuestionKind = "sampling"
	// QuestionRoots asks for the client's roots.
	QuestionRoots QuestionKind = "roots"
)

// Question is one input request of an elicited call or a task: a form for
// the user to fill in, a page for the user to visit, a prompt for the
// client's model, or a request for the client's roots.
type Question struct {
	// Key names the question; its answer comes back under it.
	Key string
	// Kind is what is asked.
	Kind QuestionKind
	// Message says what is asked, for people (form, URL); the prompt
	// (sampling).
	Message string
	// Schema is the form: a JSON Schema object of flat, primitive
	// properties (form).
	Schema json.RawMessage
	// URL is the page to visit and ElicitationID the id the client's
	// completion notice names (URL).
	URL, ElicitationID string
	// SystemPrompt and MaxTokens bound the completion (sampling).
	SystemPrompt string
	MaxTokens    int
}

// Answer is the client's answer to a Question.
type Answer struct {
	// Action is AnswerAccept, AnswerDecline or AnswerCancel; anything else
	// is no answer. Sampling and roots answers are AnswerAccept.
	Action string
	// Content is what the user gave, with AnswerAccept (form).
	Content map[string]any
	// Sampled is the model's completion (sampling).
	Sampled *Sampled
	// Roots are the client's roots (roots); none is an empty list.
	Roots []Root
}

// Sampled is a completion of the client's model.
type Sampled struct {
	// Text is its text ("" when the model answered with anything else).
	Text string
	// Model and StopReason are as the client says.
	Model, StopReason string
}

// Root is one of the client's roots.
type Root struct {
	URI, Name string
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
	// Visit is the page the call's service asked the person to visit
	// before it can make the call (Elicitor.Visit), and Key the
	// idempotency key the service was called with.
	Visit *toolv1.VisitRequired
	Key   string
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
