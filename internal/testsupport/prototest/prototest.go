// Package prototest compares protobuf messages in tests.
package prototest

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

// Equal reports, as a test error naming what was compared, how got differs
// from want (-want +got).
func Equal[M proto.Message](tb testing.TB, what string, got, want M) {
	tb.Helper()
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		tb.Errorf("%s (-want +got):\n%s", what, diff)
	}
}

// IDs returns the ids of list, in order.
func IDs[M interface{ GetId() string }](list []M) []string {
	out := make([]string, len(list))
	for i, m := range list {
		out[i] = m.GetId()
	}
	return out
}
