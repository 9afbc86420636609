//go:build !faults

package topology

import "google.golang.org/protobuf/reflect/protoreflect"

// The product build has no test-only domain (see faults.go).

func withFaults(d map[string]Domain) map[string]Domain { return d }

func faultsContracts() []protoreflect.ServiceDescriptor { return nil }
