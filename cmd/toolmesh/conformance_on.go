//go:build conformance

package main

import (
	"context"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/conformancesvc"
)

// The conformance lane (make conformance) builds toolmesh with -tags
// conformance: the binary then also serves the test-only conformance domain
// (internal/testsupport/conformancesvc), whose tools, resources and prompts are the
// fixtures the official MCP conformance suite calls by name. `toolmesh up`
// starts it beside the product's domains, and the edge serves it like any
// domain, from its contract. The product build has none of it.

func withConformanceDomains(d map[string]domain) map[string]domain {
	d["conformance"] = domain{build: buildConformance, stateless: true}
	return d
}

func buildConformance(context.Context, *sqldb.DB, serveDeps) ([]server.Service, error) {
	return []server.Service{conformancesvc.New().Server()}, nil
}
