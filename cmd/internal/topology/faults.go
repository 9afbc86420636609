//go:build faults

package topology

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
)

// The fault suite's build adds the test-only testing domain (see
// cmd/toolmesh/faults_on.go).

func withFaults(d map[string]Domain) map[string]Domain {
	d["testing"] = Domain{Port: 7150}
	return d
}

func faultsContracts() []protoreflect.ServiceDescriptor {
	return []protoreflect.ServiceDescriptor{testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingService")}
}
