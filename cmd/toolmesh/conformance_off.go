//go:build !conformance

package main

// The product build has no conformance fixtures (see conformance_on.go).

func withConformanceDomains(d map[string]domain) map[string]domain { return d }
