package main

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// contracts are the services whose RPCs the edge and the workers call as
// tools: the product's (toolcatalog.Contracts), plus the test-only testing
// domain in the fault suite's build (see faults_on.go) and the conformance
// fixtures in the conformance lane's (see conformance_on.go).
func contracts() []protoreflect.ServiceDescriptor {
	return append(append(toolcatalog.Contracts(), faultsContracts()...), conformanceContracts()...)
}
