//go:build conformance

package topology

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
)

// The conformance lane's build adds the conformance fixtures' domain (see
// cmd/toolmesh/conformance_on.go).

func withConformance(d map[string]Domain) map[string]Domain {
	d["conformance"] = Domain{Port: 7151}
	return d
}

func conformanceContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{conformancev1.File_toolmesh_conformance_v1_conformance_proto.Services().ByName("ConformanceService")}
}
