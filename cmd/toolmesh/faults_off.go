//go:build !faults

package main

// The product build has no test-only domain (see faults_on.go).

func withFaultsDomains(d map[string]domain) map[string]domain { return d }
