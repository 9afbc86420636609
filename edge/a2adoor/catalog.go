package a2adoor

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/mesh"
	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// agentCardMediaType is the AI catalog's type of an A2A agent card.
const agentCardMediaType = "application/a2a-agent-card+json"

// maxCatalogAgents bounds the agents one catalog lists.
const (
	maxCatalogAgents = 1000
	catalogPage      = 200
)

var _ port.CardCatalog = (*Door)(nil)

// CatalogEntries are the cards of the agents the door serves, for the
// edge's AI catalog: each active agent's, in id order, at most
// maxCatalogAgents of them.
func (g *Door) CatalogEntries(ctx context.Context, _ *http.Request) ([]port.CatalogEntry, error) {
	host := g.hostPort.Host
	if u, err := url.Parse(g.base); err == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: a2aSelf})
	var out []port.CatalogEntry
	for offset := int32(0); len(out) < maxCatalogAgents; {
		res, err := g.inbound.ListAgents(ctx, &inboundv1.ListAgentsRequest{Offset: offset, Limit: catalogPage})
		if err != nil {
			return nil, fmt.Errorf("list the agents served over A2A: %w", err)
		}
		for _, ag := range res.GetAgents() {
			out = append(out, port.CatalogEntry{Identifier: "urn:air:" + host + ":a2a:" + ag.GetAgentId(), Type: agentCardMediaType,
				URL: g.endpoint(ag.GetAgentId()) + a2alink.CardPath})
		}
		if res.GetPage().NextOffset == nil || len(res.GetAgents()) == 0 {
			break
		}
		offset = res.GetPage().GetNextOffset()
	}
	return out[:min(len(out), maxCatalogAgents)], nil
}
