// Package topology is the mesh's layout as every command knows it: its
// domains, the port `toolmesh up` runs each on, the services of shared
// contracts a domain serves besides its own, and the contracts whose RPCs
// the edge and the workers call as tools. The fault suite's build (-tags
// faults) and the conformance lane's (-tags conformance) add their
// test-only domains (faults.go, conformance.go).
//
// It holds no service code: a command that only calls the domains (the
// edge) needs this table, not the services.
package topology

import (
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/events/v1/eventsv1connect"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1/inboundv1connect"
)

// Domain is one domain of the mesh.
type Domain struct {
	// Port is the domain's default port under `toolmesh up`.
	Port int
	// Serves lists the services of shared contracts (not a domain's own)
	// the domain serves besides its own, by fully-qualified name: the edge
	// reaches them at the domain's address.
	Serves []string
}

// Domains are the mesh's domains by name.
var Domains = withConformance(withFaults(map[string]Domain{
	"tasks":    {Port: 7101},
	"agents":   {Port: 7102},
	"messages": {Port: 7103},
	"memory":   {Port: 7104},
	"credits":  {Port: 7105},
	"owner":    {Port: 7106},
	"audit":    {Port: 7108},

	"schedules":  {Port: 7107},
	"projects":   {Port: 7112},
	"workflows":  {Port: 7113},
	"reputation": {Port: 7114},
	// The event log serves the outboxes' events to the edge.
	"eventlog": {Port: 7115, Serves: []string{eventsv1connect.EventsServiceName}},

	// The integrations. remoteagents also takes messages from remote
	// agents (the inbound contract).
	"remoteagents": {Port: 7109, Serves: []string{inboundv1connect.InboundServiceName}},
	"github":       {Port: 7110},
	"connections":  {Port: 7116},
	"search":       {Port: 7111},
}))

// Contracts are the services whose RPCs the edge and the workers call as
// tools: the product's (toolcatalog.Contracts), plus the test-only domains'
// in the fault suite's and the conformance lane's builds.
func Contracts() []protoreflect.ServiceDescriptor {
	return append(append(toolcatalog.Contracts(), faultsContracts()...), conformanceContracts()...)
}

// OrLoopback returns services (domain=URL), or every domain on 127.0.0.1
// at its default port when services is empty.
func OrLoopback(services map[string]string) map[string]string {
	if len(services) > 0 {
		return services
	}
	out := map[string]string{}
	for name, d := range Domains {
		out[name] = fmt.Sprintf("http://127.0.0.1:%d", d.Port)
	}
	return out
}

// ServiceURLs maps domain names to the fully-qualified names of their
// services in Contracts, and of the shared contracts' services the domain
// serves too (Domain.Serves).
func ServiceURLs(byDomain map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for domain, url := range byDomain {
		found := false
		for _, sd := range Contracts() {
			if string(sd.ParentFile().Package()) == "toolmesh."+domain+".v1" {
				out[string(sd.FullName())] = url
				found = true
			}
		}
		for _, name := range Domains[domain].Serves {
			out[name] = url
		}
		if !found && len(Domains[domain].Serves) == 0 {
			return nil, fmt.Errorf("no contract for domain %q", domain)
		}
	}
	return out, nil
}
