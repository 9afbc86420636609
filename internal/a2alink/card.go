package a2alink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
)

// Card is a remote agent's card as it was read: the card (a 1.0 card, or a
// 0.3 card read as one), the bytes it came as (what a signature covers) and
// where it was read from.
type Card struct {
	*a2a.AgentCard
	Raw []byte
	URL string
}

// cardLocation is the URL of the card of the agent at raw: a URL ending in
// .json is the card itself, anything else the agent's base URL.
func cardLocation(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("the agent's address must be an http or https URL")
	}
	if u.User != nil {
		return "", errors.New("the agent's address must not carry user info")
	}
	u.RawQuery, u.Fragment = "", ""
	if strings.HasSuffix(u.Path, ".json") {
		return u.String(), nil
	}
	return u.JoinPath(CardPath).String(), nil
}

// FetchCard reads the card of the agent at raw (its base URL or its card's
// URL) with client, a 1.0 card or a 0.3 one.
func FetchCard(ctx context.Context, client *http.Client, raw string) (*Card, error) {
	loc, err := cardLocation(raw)
	if err != nil {
		return nil, &remoteError{msg: err.Error(), err: a2a.ErrInvalidRequest}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
	if err != nil {
		return nil, &remoteError{msg: "the agent's address is not a URL", err: a2a.ErrInvalidRequest}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(a2a.SvcParamVersion, Version10)
	resp, err := client.Do(req)
	if err != nil {
		return nil, CardError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, CardError(&agentcard.ErrStatusNotOK{StatusCode: resp.StatusCode, Status: resp.Status})
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, CardError(err)
	}
	card, err := a2av0.NewAgentCardParser()(body)
	if err != nil {
		return nil, &remoteError{msg: "the agent card is not an A2A agent card (JSON)", err: err}
	}
	if len(card.SupportedInterfaces) == 0 {
		card.SupportedInterfaces = legacyInterface(body)
	}
	if len(card.SupportedInterfaces) == 0 {
		return nil, &remoteError{msg: "the agent card names no interface (no supportedInterfaces, no url)", err: a2a.ErrInvalidAgentResponse}
	}
	return &Card{AgentCard: card, Raw: body, URL: loc}, nil
}

// legacyInterface is the interface of a 0.3 card that names its url but
// not its transport, which 0.3 says is then JSON-RPC.
func legacyInterface(body []byte) []*a2a.AgentInterface {
	var c struct {
		URL                string `json:"url"`
		ProtocolVersion    string `json:"protocolVersion"`
		PreferredTransport string `json:"preferredTransport"`
	}
	if json.Unmarshal(body, &c) != nil || c.URL == "" || c.PreferredTransport != "" {
		return nil
	}
	v := c.ProtocolVersion
	if v == "" {
		v = Version03
	}
	return []*a2a.AgentInterface{{URL: c.URL, ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2a.ProtocolVersion(v)}}
}

// CardError says why a card could not be read, naming no path or query;
// it wraps the cause.
func CardError(err error) error {
	var st *agentcard.ErrStatusNotOK
	if errors.As(err, &st) {
		return &remoteError{msg: "the agent card could not be read: the agent answered " + st.Status, err: err}
	}
	return &remoteError{msg: "the agent card could not be read: " + Describe(err), err: err}
}

// errNoInterface is a card without an interface the mesh speaks.
var errNoInterface = errors.New("no interface this mesh speaks")

// Negotiate picks the interface of card the mesh talks to the agent
// through: A2A 1.0 over JSON-RPC, else 1.0 over HTTP+JSON, else 0.3 over
// JSON-RPC — the newest version first, and JSON-RPC before HTTP+JSON
// because every A2A SDK answers its errors in a shape the other SDKs read.
func Negotiate(card *a2a.AgentCard) (*a2a.AgentInterface, error) {
	rank := func(i *a2a.AgentInterface) int {
		v := majorMinor(string(i.ProtocolVersion))
		switch {
		case v == Version10 && i.ProtocolBinding == a2a.TransportProtocolJSONRPC:
			return 0
		case v == Version10 && i.ProtocolBinding == a2a.TransportProtocolHTTPJSON:
			return 1
		case v == Version03 && i.ProtocolBinding == a2a.TransportProtocolJSONRPC:
			return 2
		}
		return -1
	}
	var best *a2a.AgentInterface
	for _, i := range card.SupportedInterfaces {
		if i == nil || rank(i) < 0 || !httpURL(i.URL) {
			continue
		}
		if best == nil || rank(i) < rank(best) {
			best = i
		}
	}
	if best == nil {
		var have []string
		for _, i := range card.SupportedInterfaces {
			if i != nil {
				have = append(have, string(i.ProtocolBinding)+" "+string(i.ProtocolVersion))
			}
		}
		return nil, &remoteError{msg: fmt.Sprintf("the agent offers no interface this mesh speaks (A2A 1.0 over JSON-RPC or HTTP+JSON, 0.3 over JSON-RPC); it offers %s",
			clipURL(strings.Join(have, ", "))), err: errNoInterface}
	}
	out := *best
	out.ProtocolVersion = a2a.ProtocolVersion(majorMinor(string(best.ProtocolVersion)))
	return &out, nil
}

// majorMinor is a protocol version without its patch ("0.3.0" is "0.3").
func majorMinor(v string) string {
	if i := strings.IndexByte(v, '.'); i >= 0 {
		if j := strings.IndexByte(v[i+1:], '.'); j >= 0 {
			return v[:i+1+j]
		}
	}
	return v
}

func httpURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// NewClient opens a client to the agent interface iface (one Negotiate
// picked), speaking its binding and version over client. The tenant of
// an inbound call never travels on: each call names its own.
func NewClient(ctx context.Context, client *http.Client, iface *a2a.AgentInterface) (*a2aclient.Client, error) {
	return a2aclient.NewFromEndpoints(ctx, []*a2a.AgentInterface{iface},
		a2aclient.WithDefaultsDisabled(),
		a2aclient.WithJSONRPCTransport(client),
		a2aclient.WithRESTTransport(client),
		a2av0.WithJSONRPCTransport(a2av0.JSONRPCTransportConfig{Client: client}),
		a2aclient.WithConfig(a2aclient.Config{AcceptedOutputModes: []string{"text/plain"}, DisableTenantPropagation: true}),
	)
}
