//go:build !conformance

package main

import "google.golang.org/protobuf/reflect/protoreflect"

// The product build has no conformance fixtures (see conformance_on.go).

func withConformanceDomains(d map[string]domain) map[string]domain { return d }

func conformanceContracts() []protoreflect.ServiceDescriptor { return nil }
