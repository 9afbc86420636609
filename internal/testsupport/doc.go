// Package testsupport holds, in its subpackages, what the tests use and the
// product does not: servers and clusters started for a test (pgtest,
// temporaltest, servertest, sqldbtest), fakes of outside services
// (githubtest, oidctest, oauthtest, a2atest), clients we did not write run
// from Go (nodetest, browsertest, mcpevents), the test-only contracts'
// backends (testingsvc, conformancesvc), and helpers for ports, protobuf
// values, replicas and Temporal histories (porttest, prototest,
// replicatest, workflowtest). The rest of internal/ is the product's
// plumbing.
package testsupport
