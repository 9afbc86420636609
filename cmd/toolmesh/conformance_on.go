//go:build conformance

package main

import (
	"context"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/server"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	"github.com/toolmesh/toolmesh/internal/testsupport/conformancesvc"
	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
)

// The conformance lane (make conformance) builds toolmesh with -tags
// conformance: the binary then also serves the test-only conformance domain
// (internal/testsupport/conformancesvc), whose tools, resources and prompts are the
// fixtures the official MCP conformance suite calls by name. `toolmesh up`
// starts it beside the product's domains, and the edge serves it like any
// domain, from its contract. The product build has none of it.

func withConformanceDomains(d map[string]domain) map[string]domain {
	d["conformance"] = domain{port: 7151, build: buildConformance, stateless: true}
	return d
}

func conformanceContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{conformancev1.File_toolmesh_conformance_v1_conformance_proto.Services().ByName("ConformanceService")}
}

func buildConformance(context.Context, *sqldb.DB, serveDeps) ([]server.Service, error) {
	return []server.Service{conformancesvc.New().Server()}, nil
}
