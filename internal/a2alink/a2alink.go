// Package a2alink is the mesh's side of the Agent2Agent protocol (A2A 1.0,
// and 0.3 for older peers, through github.com/a2aproject/a2a-go/v2) that
// both directions share: reading a remote agent's card and picking the
// interface to talk to it through the egress guard (card.go), signing and
// verifying cards (cardsig.go), the invocation depth that travels with a
// message between meshes (depth.go), the A2A shape of the tasks the mesh's
// agents keep (inbound.go) and the signature of the pushes it sends
// (push.go).
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
// can lower it. The same keys sign the mesh's agent cards and its pushes.
package a2alink

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"

	"github.com/toolmesh/toolmesh/internal/egress"
)

// DepthExtension is the URI of the invocation-depth extension.
const DepthExtension = "https://github.com/toolmesh/toolmesh/a2a/ext/depth/v1"

// MetadataDepthToken is the message metadata key of the signed depth.
const MetadataDepthToken = DepthExtension + "/token"

// KeysPath is where a mesh publishes the keys its depth tokens, cards and
// pushes are signed with, below its A2A base URL.
const KeysPath = "/.well-known/jwks.json"

// CardPath is where an agent's card is, below the agent's base URL.
const CardPath = "/.well-known/agent-card.json"

// The protocol versions spoken, as cards and the A2A-Version header name
// them (Major.Minor).
const (
	Version10 = "1.0"
	Version03 = "0.3"
)

// Limits of what is read from a remote agent.
const (
	// MaxCardBytes bounds an agent card.
	MaxCardBytes = 256 << 10
	// MaxResponseBytes bounds one answer (a JSON-RPC or REST response, or
	// the whole of a stream).
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

// remoteError is a failure to talk to a remote agent, described without
// the URL's path or query.
type remoteError struct {
	msg string
	err error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.err }

// Describe says what went wrong talking to a remote agent, in its words
// when it answered with an A2A error, naming no URL path or query.
func Describe(err error) string {
	if re, ok := errors.AsType[*remoteError](err); ok {
		return re.msg
	}
	if ae, ok := errors.AsType[*a2a.Error](err); ok && ae.Message != "" {
		return ae.Message
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
	a2a.ErrUnsupportedContentType, a2a.ErrInvalidAgentResponse, a2a.ErrExtendedCardNotConfigured,
	a2a.ErrExtensionSupportRequired, a2a.ErrVersionNotSupported, a2a.ErrUnauthenticated, a2a.ErrUnauthorized,
}

// Permanent reports whether a failure to talk to a remote agent is one no
// retry changes: a refused address, a card the agent does not serve (4xx)
// or that is not a card, or an A2A error answer. Timeouts, connection
// failures and 5xx answers may pass.
func Permanent(err error) bool {
	if errors.Is(err, egress.ErrRefused) || errors.Is(err, egress.ErrResponseTooLarge) || errors.Is(err, errNoInterface) {
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
		if p == nil {
			continue
		}
		switch v := p.Content.(type) {
		case a2a.Text:
			out = append(out, string(v))
		case a2a.Data:
			if m, ok := v.Value.(map[string]any); ok {
				out = append(out, fmt.Sprintf("[data: %d fields]", len(m)))
			} else {
				out = append(out, "[data]")
			}
		case a2a.Raw, a2a.URL:
			out = append(out, "[file]")
		}
	}
	return strings.Join(out, "\n")
}

// StateName is a task state as the mesh shows it: the A2A 0.3 name
// ("working", "input-required"), which 1.0's TASK_STATE_... names map to.
func StateName(s a2a.TaskState) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(string(s), "TASK_STATE_")), "_", "-")
}
