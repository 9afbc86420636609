//go:build !faults

package main

import "google.golang.org/protobuf/reflect/protoreflect"

// The product build has no test-only domain (see faults_on.go).

func withFaultsDomains(d map[string]domain) map[string]domain { return d }

func faultsContracts() []protoreflect.ServiceDescriptor { return nil }
