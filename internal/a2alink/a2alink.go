// Package a2alink is the mesh's side of the Agent2Agent protocol (A2A 0.3)
// that both directions share: reading a remote agent's card and opening a
// client to it through the egress guard, and the invocation depth that
// travels with a message between meshes.
//
// The depth travels in the message's metadata as a signed token (a compact
// JWS, EdDSA) under the key MetadataDepthToken, the extension DepthExtension
// that a mesh's agent cards declare:
//
//	header: {"alg":"EdDSA","kid":"<key id>","typ":"toolmesh-a2a-depth+jwt"}
//	claims: {"iss":"<the sending mesh's A2A base URL>","aud":"<the agent's A2A URL>",
//	         "sub":"<the sending agent>","jti":"<the A2A message id>",
//	         "depth":2,"iat":<unix>,"exp":<unix>}
//
// The sender publishes its public keys at <iss>/.well-known/jwks.json; the
// receiver fetches them there (through the egress guard) and refuses a token
// it cannot verify, one for another agent (aud), one for another message
// (jti) or one that has expired. So a depth is what the sending mesh
// signed: nothing between the meshes, and no agent that relays the message,
// can lower it.
package a2alink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"github.com/a2aproject/a2a-go/a2aclient/agentcard"

	"github.com/toolmesh/toolmesh/internal/egress"
)

// DepthExtension is the URI of the invocation-depth extension.
const DepthExtension = "https://github.com/toolmesh/toolmesh/a2a/ext/depth/v1"

// MetadataDepthToken is the message metadata key of the signed depth.
const MetadataDepthToken = DepthExtension + "/token"

// KeysPath is where a mesh publishes the keys its depth tokens are signed
// with, below its A2A base URL.
const KeysPath = "/.well-known/jwks.json"

// CardPath is where an agent's card is, below the agent's base URL.
const CardPath = "/.well-known/agent-card.json"

// ProtocolVersion is the A2A protocol version spoken.
const ProtocolVersion = "0.3.0"

// Limits of what is read from a remote agent.
const (
	// MaxCardBytes bounds an agent card.
	MaxCardBytes = 256 << 10
	// MaxResponseBytes bounds one JSON-RPC answer.
	MaxResponseBytes = 4 << 20
	// CardTimeout bounds reading a card.
	CardTimeout = 10 * time.Second
)

// HTTPClient returns the client that reaches remote agents: every address
// passes policy, at most max bytes are read per answer, each request is
// bounded by timeout.
func HTTPClient(policy egress.Policy, timeout time.Duration, max int64) *http.Client {
	return policy.Client(egress.ClientOptions{Timeout: timeout, MaxResponseBytes: max})
}

// cardLocation splits an agent's address into the base the resolver joins
// the card path to: a URL ending in .json is the card itself, anything else
// the agent's base URL.
func cardLocation(raw string) (base, path string, err error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", errors.New("the agent's address must be an http or https URL")
	}
	if u.User != nil {
		return "", "", errors.New("the agent's address must not carry user info")
	}
	if strings.HasSuffix(u.Path, ".json") {
		return u.Scheme + "://" + u.Host, u.Path, nil
	}
	u.RawQuery, u.Fragment = "", ""
	return u.String(), CardPath, nil
}

// ResolveCard reads the card of the agent at raw (its base URL or its
// card's URL) with client.
func ResolveCard(ctx context.Context, client *http.Client, raw string) (*a2a.AgentCard, error) {
	base, path, err := cardLocation(raw)
	if err != nil {
		return nil, &remoteError{msg: err.Error(), err: a2a.ErrInvalidRequest}
	}
	card, err := agentcard.NewResolver(client).Resolve(ctx, base, agentcard.WithPath(path))
	if err != nil {
		return nil, CardError(err)
	}
	if card.PreferredTransport == "" {
		// The protocol's default.
		card.PreferredTransport = a2a.TransportProtocolJSONRPC
	}
	if u, err := url.Parse(card.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &remoteError{msg: fmt.Sprintf("the agent card names no http or https endpoint (url %q)", clipURL(card.URL)), err: a2a.ErrInvalidAgentResponse}
	}
	return card, nil
}

// CardError says why a card could not be read, naming no path or query;
// it wraps the cause.
func CardError(err error) error {
	var st *agentcard.ErrStatusNotOK
	if errors.As(err, &st) {
		return &remoteError{msg: "the agent card could not be read: the agent answered " + st.Status, err: err}
	}
	return &remoteError{msg: "the agent card could not be read: " + egress.DescribeError(err), err: err}
}

// remoteError is a failure to talk to a remote agent, described without
// the URL's path or query.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// Describe says what went wrong talking to a remote agent, in its words
// when it answered with an A2A error (without the client's sentinel
// suffix), naming no URL path or query.
func Describe(err error) string {
	if re, ok := errors.AsType[*remoteError](err); ok {
		return re.msg
	}
	msg := egress.DescribeError(err)
	for _, s := range protocolErrors {
		if errors.Is(err, s) {
			return strings.TrimSuffix(msg, ": "+s.Error())
		}
	}
	return msg
}

// protocolErrors are the A2A errors a remote agent answers with, by which
// it refuses the request itself: no retry changes them.
var protocolErrors = []error{
	a2a.ErrParseError, a2a.ErrInvalidRequest, a2a.ErrMethodNotFound, a2a.ErrInvalidParams, a2a.ErrServerError,
	a2a.ErrTaskNotFound, a2a.ErrTaskNotCancelable, a2a.ErrPushNotificationNotSupported, a2a.ErrUnsupportedOperation,
	a2a.ErrUnsupportedContentType, a2a.ErrInvalidAgentResponse, a2a.ErrAuthenticatedExtendedCardNotConfigured,
}

// Permanent reports whether a failure to talk to a remote agent is one no
// retry changes: a refused address, a card the agent does not serve (4xx)
// or that is not a card, or an A2A error answer. Timeouts, connection
// failures and 5xx answers may pass.
func Permanent(err error) bool {
	if errors.Is(err, egress.ErrRefused) || errors.Is(err, egress.ErrResponseTooLarge) {
		return true
	}
	var st *agentcard.ErrStatusNotOK
	if errors.As(err, &st) {
		return st.StatusCode < 500 && st.StatusCode != http.StatusTooManyRequests && st.StatusCode != http.StatusRequestTimeout
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syn) || errors.As(err, &typ) {
		return true
	}
	for _, s := range protocolErrors {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// NewClient opens a JSON-RPC client to an agent whose card is known, or to
// the endpoint of an earlier call (card nil). Sends do not block: a task
// comes back at once, to be polled.
func NewClient(ctx context.Context, client *http.Client, card *a2a.AgentCard, endpoint string) (*a2aclient.Client, error) {
	opts := []a2aclient.FactoryOption{
		a2aclient.WithDefaultsDisabled(),
		a2aclient.WithJSONRPCTransport(client),
		a2aclient.WithConfig(a2aclient.Config{Polling: true, AcceptedOutputModes: []string{"text/plain"}}),
	}
	if card != nil {
		return a2aclient.NewFromCard(ctx, card, opts...)
	}
	return a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: endpoint, Transport: a2a.TransportProtocolJSONRPC}}, opts...)
}

func clipURL(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// TakesDepth reports whether card declares the depth extension (another
// toolmesh does).
func TakesDepth(card *a2a.AgentCard) bool {
	for _, e := range card.Capabilities.Extensions {
		if e.URI == DepthExtension {
			return true
		}
	}
	return false
}

// Text joins a message's or artifact's text parts (and describes the
// others) as the plain text an agent reads.
func Text(parts a2a.ContentParts) string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case a2a.TextPart:
			out = append(out, v.Text)
		case *a2a.TextPart:
			out = append(out, v.Text)
		case a2a.DataPart:
			out = append(out, fmt.Sprintf("[data: %d fields]", len(v.Data)))
		case a2a.FilePart:
			out = append(out, "[file]")
		}
	}
	return strings.Join(out, "\n")
}
