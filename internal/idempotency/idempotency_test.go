package idempotency_test

import (
	"net/http"
	"testing"

	"github.com/toolmesh/toolmesh/internal/idempotency"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestDigestIsTheRequestsIdentity(t *testing.T) {
	req := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := idempotency.Digest(req(map[string]any{"b": 1, "a": "x", "c": []any{true, nil}}))
	// Maps are encoded in a fixed order, so equal requests digest alike
	// however they were built.
	for range 20 {
		if got := idempotency.Digest(req(map[string]any{"c": []any{true, nil}, "a": "x", "b": 1})); got != a {
			t.Fatalf("equal requests digest to %s and %s", a, got)
		}
	}
	if got := idempotency.Digest(req(map[string]any{"b": 2, "a": "x", "c": []any{true, nil}})); got == a {
		t.Error("different requests digest alike")
	}
	if len(a) != len("sha256:")+64 || a[:7] != "sha256:" {
		t.Errorf("digest %q, want sha256: and 64 hex digits", a)
	}
}

func TestReplayOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		h      http.Header
		of     string
		replay bool
	}{
		{"no header", http.Header{}, "", false},
		{"a replay of a keyed call", http.Header{idempotency.HeaderReplayOf: {"k1"}}, "k1", true},
		{"a replay of a call without a key", http.Header{idempotency.HeaderReplayOf: {""}}, "", true},
	} {
		if of, replay := idempotency.ReplayOf(tc.h); of != tc.of || replay != tc.replay {
			t.Errorf("%s: ReplayOf = %q, %v; want %q, %v", tc.name, of, replay, tc.of, tc.replay)
		}
	}
}
