//go:build !conformance

package topology

import "google.golang.org/protobuf/reflect/protoreflect"

// The product build has no conformance fixtures (see conformance.go).

func withConformance(d map[string]Domain) map[string]Domain { return d }

func conformanceContracts() []protoreflect.ServiceDescriptor { return nil }
