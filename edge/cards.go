package edge

import (
	"context"
	"encoding/json"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
)

// cardReader is who reads card extensions: the mesh's A2A side, with the
// read scope only.
var cardReader = identity.MeshReader("toolmesh-a2a")

var _ port.CardExtensions = (*pipeline)(nil)

// CardExtensions implements port.CardExtensions through the pipeline, so a
// card extension is read exactly as a client would read its tool.
func (p *pipeline) CardExtensions(ctx context.Context, agent string) []port.CardExtension {
	var out []port.CardExtension
	for _, c := range p.reg.CardExtensions() {
		t, ok := p.Lookup(c.Tool.Name)
		if !ok {
			continue
		}
		args, err := json.Marshal(map[string]string{c.AgentField: agent})
		if err != nil {
			continue
		}
		env := p.Call(ctx, &port.Call{Tool: t, Caller: cardReader, Arguments: args, Unmetered: true}).Envelope
		if env == nil || env.Status != "ok" {
			if env != nil && env.DomainCode != "not_found" {
				p.log.WarnContext(ctx, "a2a.card_extension_failed", "tool", c.Tool.Name, "agent", agent, "domain_code", env.DomainCode, "message", env.Message)
			}
			continue
		}
		var params map[string]any
		if err := json.Unmarshal(env.Data, &params); err != nil {
			p.log.WarnContext(ctx, "a2a.card_extension_failed", "tool", c.Tool.Name, "agent", agent, "error", err)
			continue
		}
		out = append(out, port.CardExtension{URI: c.URI, Description: c.Description, Params: params})
	}
	return out
}
