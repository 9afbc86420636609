//lint:file-ignore SA1019 sampling and roots are deprecated from 2026-07-28 on (SEP-2577) but still part of the protocol in its deprecation window; the mesh asks them only of clients that declare them

package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// What a tools/call's client can do about a call's input requests
// (port.Elicitation), and the requests as MCP carries them: forms and URLs
// (elicitation/create), completions of the client's model
// (sampling/createMessage) and the client's roots (roots/list). The door
// converts at its edge, in one place for every era — input requests of an
// input_required result (2026-07-28), requests over the session (2025), a
// task's inputRequests — so that the pipeline and edge/elicit speak no MCP.

// MCP methods of the input requests.
const (
	methodElicit        = "elicitation/create"
	methodCreateMessage = "sampling/createMessage"
	methodListRoots     = "roots/list"
)

// elicitationOf is what the client of req can do about input requests:
// what it declared it can answer, the round it answers (requestState and
// inputResponses, 2026-07-28) and, for a client of the session era, how to
// ask it within the call.
func elicitationOf(ctx context.Context, req *mcp.CallToolRequest) *port.Elicitation {
	e := &port.Elicitation{State: req.Params.RequestState}
	if o, ok := ctx.Value(offersKey{}).(clientOffers); ok {
		e.CanAsk, e.URL, e.Sampling, e.Roots = o.form, o.url, o.sampling, o.roots
	} else {
		e.CanAsk, e.URL, e.Sampling, e.Roots = offers(req)
	}
	if remote, _ := ctx.Value(remoteClientKey{}).(bool); remote {
		// Its roots name directories of another machine.
		e.Roots = false
	}
	for k, r := range req.Params.InputResponses {
		// Responses that are not answers are left out (the workflow asks
		// again).
		if a, ok := answerOf(r); ok {
			if e.Answers == nil {
				e.Answers = map[string]port.Answer{}
			}
			e.Answers[k] = a
		}
	}
	if req.ProtocolVersion() < ModernProtocol {
		e.Ask = func(ctx context.Context, q port.Question) (port.Answer, error) {
			if req.Session == nil {
				return port.Answer{}, errors.New("no session to ask over")
			}
			return askSession(ctx, req.Session, q, nil)
		}
		e.Complete = func(ctx context.Context, id string) {
			if req.Session != nil {
				_ = req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: id})
			}
		}
	}
	return e
}

// remoteClientKey marks a request that did not reach the edge on a
// loopback address (httpguard.Guard.Loopback): its client may be on
// another machine, and is not asked for its roots. A client over stdio,
// or over HTTP on loopback, is on the edge's machine.
type remoteClientKey struct{}

// offersKey holds, for a call the fast path serves (fastpath.go), what its
// client offers (clientOffers), read from the capabilities as the request
// carried them, so that offers need not decode them again (the SDK's
// ClientCapabilities re-encodes the decoded request's value and decodes it
// with a decoder that allocates a large buffer, on every call).
type offersKey struct{}

// clientOffers is what offers reports.
type clientOffers struct{ form, url, sampling, roots bool }

// decodeOffers reads what a client of the stateless protocol offers from
// its clientCapabilities as they came (raw JSON), decoded the way the SDK
// decodes them for ClientCapabilities; ok is false when they do not decode.
func decodeOffers(raw json.RawMessage, version string) (o clientOffers, ok bool) {
	var v2 struct {
		mcp.ClientCapabilities
		Roots *mcp.RootCapabilities `json:"roots,omitempty"`
	}
	if json.Unmarshal(raw, &v2) != nil {
		return clientOffers{}, false
	}
	caps := v2.ClientCapabilities
	caps.RootsV2 = v2.Roots
	return capsOffers(&caps, version), true
}

// offersOf is decodeOffers for capabilities the fast path has decoded into
// caps already (raw as they came): the shapes clients send — elicitation
// with form and url, sampling, roots with listChanged, each an object and
// nothing else in it but what the SDK reads — are read from caps, without
// decoding raw again; any other is decoded from raw. The offers are the same
// either way (FuzzOffersOf).
func offersOf(caps map[string]any, raw json.RawMessage, version string) (clientOffers, bool) {
	var c mcp.ClientCapabilities
	for k, v := range caps {
		m, isObject := v.(map[string]any)
		if !isObject {
			return decodeOffers(raw, version)
		}
		switch k {
		case "elicitation":
			c.Elicitation = &mcp.ElicitationCapabilities{}
			for mode, settings := range m {
				if _, isObject := settings.(map[string]any); !isObject {
					return decodeOffers(raw, version)
				}
				switch mode {
				case "form":
					c.Elicitation.Form = &mcp.FormElicitationCapabilities{}
				case "url":
					c.Elicitation.URL = &mcp.URLElicitationCapabilities{}
				default:
					return decodeOffers(raw, version)
				}
			}
		case "sampling":
			if len(m) != 0 {
				return decodeOffers(raw, version)
			}
			c.Sampling = &mcp.SamplingCapabilities{}
		case "roots":
			c.RootsV2 = &mcp.RootCapabilities{}
			for name, x := range m {
				listChanged, isBool := x.(bool)
				if name != "listChanged" || !isBool {
					return decodeOffers(raw, version)
				}
				c.RootsV2.ListChanged = listChanged
			}
		default:
			return decodeOffers(raw, version)
		}
	}
	return capsOffers(&c, version), true
}

// offers reports what the client of req declared it can answer: form and
// URL elicitation, sampling and roots.
func offers(req *mcp.CallToolRequest) (form, url, sampling, roots bool) {
	o := capsOffers(req.ClientCapabilities(), req.ProtocolVersion())
	return o.form, o.url, o.sampling, o.roots
}

// capsOffers is what a client declaring caps (nil: nothing) at protocol
// version can answer.
func capsOffers(caps *mcp.ClientCapabilities, version string) clientOffers {
	if caps == nil {
		return clientOffers{}
	}
	o := clientOffers{sampling: caps.Sampling != nil, roots: caps.RootsV2 != nil}
	if version != "" && version < elicitationSince {
		// A client of an older protocol has no elicitation to declare.
		return o
	}
	if caps.Elicitation != nil {
		// An empty elicitation capability means form.
		o.form = caps.Elicitation.Form != nil || caps.Elicitation.URL == nil
		o.url = caps.Elicitation.URL != nil
	}
	return o
}

// elicitationSince is the first protocol version with elicitation.
const elicitationSince = "2025-06-18"

// inputRequest is q as an MCP input request: its method and params.
func inputRequest(q port.Question) (string, mcp.InputRequest) {
	switch q.Kind {
	case port.QuestionURL:
		return methodElicit, &mcp.ElicitParams{Mode: "url", Message: q.Message, URL: q.URL, ElicitationID: q.ElicitationID}
	case port.QuestionSampling:
		return methodCreateMessage, samplingParams(q)
	case port.QuestionRoots:
		return methodListRoots, &mcp.ListRootsParams{}
	}
	return methodElicit, elicitParams(q)
}

// stateless is q as a 2026-07-28 input request: a URL question has no
// elicitationId (the client learns the visit is done by calling again).
func stateless(q port.Question) port.Question {
	q.ElicitationID = ""
	return q
}

// elicitParams is q, a form question, as a form elicitation.
func elicitParams(q port.Question) *mcp.ElicitParams {
	return &mcp.ElicitParams{Mode: "form", Message: q.Message, RequestedSchema: q.Schema}
}

// samplingParams is q, a sampling question, as a sampling request: the
// prompt as the one user message.
func samplingParams(q port.Question) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{
		Messages:     []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: q.Message}}},
		MaxTokens:    int64(q.MaxTokens),
		SystemPrompt: q.SystemPrompt,
	}
}

// askSession asks q over the session ss and waits for the answer; meta,
// when set, relates the request to a task.
func askSession(ctx context.Context, ss *mcp.ServerSession, q port.Question, meta mcp.Meta) (port.Answer, error) {
	switch q.Kind {
	case port.QuestionSampling:
		p := samplingParams(q)
		p.Meta = meta
		r, err := ss.CreateMessage(ctx, p)
		if err != nil {
			return port.Answer{}, err
		}
		a, _ := answerOf(r)
		return a, nil
	case port.QuestionRoots:
		r, err := ss.ListRoots(ctx, &mcp.ListRootsParams{Meta: meta})
		if err != nil {
			return port.Answer{}, err
		}
		a, _ := answerOf(r)
		return a, nil
	}
	_, req := inputRequest(q)
	p := req.(*mcp.ElicitParams)
	p.Meta = meta
	r, err := ss.Elicit(ctx, p)
	if err != nil {
		return port.Answer{}, err
	}
	return port.Answer{Action: r.Action, Content: r.Content}, nil
}

// answerOf reads an MCP input response as an answer; ok is false for one
// the door cannot read.
func answerOf(r mcp.InputResponse) (port.Answer, bool) {
	switch r := r.(type) {
	case *mcp.ElicitResult:
		return port.Answer{Action: r.Action, Content: r.Content}, true
	case *mcp.CreateMessageResult:
		return sampled(r.Model, r.StopReason, []mcp.Content{r.Content}), true
	case *mcp.CreateMessageWithToolsResult:
		return sampled(r.Model, r.StopReason, r.Content), true
	case *mcp.ListRootsResult:
		a := port.Answer{Action: port.AnswerAccept, Roots: []port.Root{}}
		for _, root := range r.Roots {
			if root != nil {
				a.Roots = append(a.Roots, port.Root{URI: root.URI, Name: root.Name})
			}
		}
		return a, true
	}
	return port.Answer{}, false
}

// sampled is a completion as an answer: the text of its text blocks (""
// when it has none; the boundary refuses it).
func sampled(model, stop string, content []mcp.Content) port.Answer {
	s := &port.Sampled{Model: model, StopReason: stop}
	for _, c := range content {
		if t, ok := c.(*mcp.TextContent); ok {
			s.Text += t.Text
		}
	}
	return port.Answer{Action: port.AnswerAccept, Sampled: s}
}

// answerOfJSON reads one raw input response (tasks/update) as an answer;
// ok is false for one the door cannot read.
func answerOfJSON(raw json.RawMessage) (port.Answer, bool) {
	var m mcp.InputResponseMap
	if err := json.Unmarshal(fmt.Appendf(nil, `{"r":%s}`, raw), &m); err != nil {
		return port.Answer{}, false
	}
	return answerOf(m["r"])
}

// roundResult is r as an input_required result: its questions as input
// requests, with the state the client returns.
func roundResult(r *port.Round) *mcp.CallToolResult {
	requests := mcp.InputRequestMap{}
	for _, q := range r.Questions {
		_, requests[q.Key] = inputRequest(stateless(q))
	}
	return &mcp.CallToolResult{InputRequests: requests, RequestState: r.State}
}

// clientGapError is, at 2026-07-28, the protocol's refusal of a call whose
// envelope says it needs what its client did not declare (docs/errors.md,
// "What a client lacks"); nil otherwise: earlier eras get the envelope.
func clientGapError(req *mcp.CallToolRequest, env *toolcall.Envelope) error {
	capability := env.ClientCapability()
	if capability == "" || req.ProtocolVersion() < ModernProtocol {
		return nil
	}
	return clientCapabilityError(capability, env.Message)
}

// clientCapabilityError is the -32021 error of a call that needs
// capability ("sampling", "roots", "elicitation.url") of its client, which
// the client did not declare: data.requiredCapabilities is a
// ClientCapabilities object naming it ({"sampling": {}}).
func clientCapabilityError(capability, message string) error {
	required := map[string]any{}
	m := required
	parts := strings.Split(capability, ".")
	for i, part := range parts {
		next := map[string]any{}
		m[part] = next
		if i < len(parts)-1 {
			m = next
		}
	}
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": required})
	return &jsonrpc.Error{Code: codeMissingCapability, Message: message, Data: data}
}
