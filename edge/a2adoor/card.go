package a2adoor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/a2aproject/a2a-go/v2/a2asrv"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// An agent's card is one JSON document that both protocol versions read:
// the A2A 1.0 card (supportedInterfaces lists every binding and version
// served) with the fields a 0.3 client reads beside it (url: the JSON-RPC
// endpoint, protocolVersion 0.3.0, preferredTransport JSONRPC), as a2a-go's
// compatibility layer writes it. It is signed with the mesh's key (A2A 1.0
// §8.4; the signature covers the 1.0 fields) and names where the key is
// published (jku). An extension a domain declares for an agent's card is
// one more entry of capabilities.extensions, appended before signing.

// legacyProtocolVersion is the protocolVersion a 0.3 client reads.
const legacyProtocolVersion = "0.3.0"

// serveCard answers an agent's card: public, for discovery.
func (g *Door) serveCard(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("agent")
	ag, err := g.activeAgent(r.Context(), id)
	if err != nil {
		if agentMissing(err) {
			httpguard.WriteRPCError(w, http.StatusNotFound, nil, httpguard.CodeInvalidRequest, fmt.Sprintf("no agent %q is served here", httpguard.Truncate(id, 64)), nil)
			return
		}
		g.log.ErrorContext(r.Context(), "a2a.directory_failed", "agent", httpguard.Truncate(id, 64), "error", err)
		httpguard.WriteRPCError(w, http.StatusServiceUnavailable, nil, httpguard.CodeInternalError, "the agents directory is unavailable; try again", nil)
		return
	}
	b, err := g.cardJSON(r.Context(), ag)
	if err != nil {
		g.log.ErrorContext(r.Context(), "a2a.card_failed", "agent", ag.GetAgentId(), "error", err)
		httpguard.WriteRPCError(w, http.StatusInternalServerError, nil, httpguard.CodeInternalError, "the card could not be made", nil)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}

// cardJSON is an agent's card as served: both versions' fields, signed.
func (g *Door) cardJSON(ctx context.Context, ag *inboundv1.Agent) ([]byte, error) {
	card := g.card(ag)
	if g.cfg.Extensions != nil {
		for _, x := range g.cfg.Extensions.CardExtensions(ctx, ag.GetAgentId()) {
			card.Capabilities.Extensions = append(card.Capabilities.Extensions, a2a.AgentExtension{URI: x.URI, Description: x.Description, Params: x.Params})
		}
	}
	p, ok := a2av0.NewStaticAgentCardProducer(card).(a2asrv.AgentCardJSONProducer)
	if !ok {
		return nil, fmt.Errorf("a2av0's card producer writes no JSON")
	}
	b, err := p.CardJSON(ctx)
	if err != nil {
		return nil, err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	doc["protocolVersion"], _ = json.Marshal(legacyProtocolVersion)
	if len(card.SecuritySchemes) > 0 {
		if doc["securitySchemes"], err = unionSchemes(doc["securitySchemes"], card.SecuritySchemes); err != nil {
			return nil, err
		}
	}
	if b, err = json.Marshal(doc); err != nil {
		return nil, err
	}
	return g.cards.Sign(b)
}

// unionSchemes gives each security scheme of a union card its A2A 1.0
// form beside its 0.3 form: a2a-go v2.3.1's compatibility layer writes the
// 1.0 form under wrong names ("http" for httpAuthSecurityScheme, and so on),
// which no 1.0 client reads.
func unionSchemes(union json.RawMessage, schemes a2a.NamedSecuritySchemes) (json.RawMessage, error) {
	var u map[string]map[string]json.RawMessage
	if err := json.Unmarshal(union, &u); err != nil {
		return nil, fmt.Errorf("read the card's 0.3 security schemes: %w", err)
	}
	b, err := json.Marshal(schemes)
	if err != nil {
		return nil, err
	}
	var v1 map[string]map[string]json.RawMessage
	if err := json.Unmarshal(b, &v1); err != nil {
		return nil, err
	}
	for name, forms := range v1 {
		if u[name] == nil {
			u[name] = map[string]json.RawMessage{}
		}
		for _, wrong := range []string{"apiKey", "http", "mutualTLS", "openIdConnect", "oauth2"} {
			delete(u[name], wrong)
		}
		for k, f := range forms {
			u[name][k] = f
		}
	}
	return json.Marshal(u)
}

// card is an agent's A2A 1.0 card.
func (g *Door) card(ag *inboundv1.Agent) *a2a.AgentCard {
	id := ag.GetAgentId()
	name := ag.GetDisplayName()
	if name == "" {
		name = id
	}
	desc := ag.GetDescription()
	if desc == "" {
		desc = "Agent " + id + " of a toolmesh mesh."
	}
	grpcIface := a2a.NewAgentInterface(g.grpcTarget(), a2a.TransportProtocolGRPC)
	grpcIface.Tenant = id
	c := &a2a.AgentCard{
		Name:        name,
		Description: desc,
		Version:     g.cfg.Version,
		SupportedInterfaces: []*a2a.AgentInterface{
			a2a.NewAgentInterface(g.endpoint(id), a2a.TransportProtocolJSONRPC),
			a2a.NewAgentInterface(g.restEndpoint(id), a2a.TransportProtocolHTTPJSON),
			grpcIface,
			{URL: g.endpoint(id), ProtocolBinding: a2a.TransportProtocolJSONRPC, ProtocolVersion: a2alink.Version03},
		},
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Capabilities: a2a.AgentCapabilities{Streaming: true, PushNotifications: true, Extensions: []a2a.AgentExtension{
			{
				URI: a2alink.DepthExtension,
				Description: "The invocation depth of the work a message asks for, signed by the sending mesh (message metadata " +
					a2alink.MetadataDepthToken + "); messages without it start a new chain.",
				Params: map[string]any{"keys": g.base + a2alink.KeysPath, "max_depth": 3},
			},
			{
				URI: a2alink.EventsExtension,
				Description: "Each event of a task carries its id (metadata: id, seq), each task snapshot the id of the last event it shows " +
					"(metadata: last_event_id). Resubscribe with the service parameter Last-Event-ID set to the last id you have, on any " +
					"interface, and get every later event, none twice. Pushes carry the same ids and are signed (JWS, typ " +
					a2alink.PushTokenType + ") with the keys published at the keys URL.",
				Params: map[string]any{"keys": g.base + a2alink.KeysPath, "resume_parameter": a2alink.ParamLastEventID},
			},
		}},
		Skills: []a2a.AgentSkill{{
			ID:   "inbox",
			Name: "Message " + id,
			Description: "Delivers your message to " + id + "'s inbox. The task stays working until " + id +
				" answers; its answer completes the task (GetTask, or stream it).",
			Tags:        []string{"messaging", "inbox"},
			InputModes:  []string{"text/plain"},
			OutputModes: []string{"text/plain"},
		}},
	}
	if g.auth != nil {
		c.SecuritySchemes = a2a.NamedSecuritySchemes{"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer", BearerFormat: "JWT",
			Description: "An OAuth 2.1 access token from " + g.auth.Issuer() + " for " + g.auth.Resource()}}
		c.SecurityRequirements = a2a.SecurityRequirementsOptions{{"bearer": a2a.SecuritySchemeScopes{}}}
	}
	return c
}
