package requeststate_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/toolmesh/toolmesh/internal/requeststate"
)

var (
	now     = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	binding = requeststate.Binding{Subject: "alice", Agent: "agent-1", Tool: "credits_grant", ArgumentsDigest: "sha256:00ff"}
)

func newKey(t testing.TB) requeststate.Key {
	t.Helper()
	k, err := requeststate.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newSealer(t testing.TB, current requeststate.Key, previous ...requeststate.Key) *requeststate.Sealer {
	t.Helper()
	s, err := requeststate.NewSealer(current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func sample() requeststate.State {
	return requeststate.State{
		Expires:    now.Add(10 * time.Minute),
		Round:      2,
		WorkflowID: "call/credits_grant/0123456789abcdef0123456789abcdef",
		RunID:      "0198c4a2-8f3e-7b1d-9c55-2f1e0a6b3d44",
	}
}

func seal(t testing.TB, s *requeststate.Sealer, st requeststate.State, b requeststate.Binding) string {
	t.Helper()
	tok, err := s.Seal(st, b)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestSealOpenRoundTrip(t *testing.T) {
	k := newKey(t)
	s := newSealer(t, k)
	tok := seal(t, s, sample(), binding)
	got, err := s.Open(tok, binding, now)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	want := sample()
	want.KeyID = k.ID
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
		t.Errorf("Open (-want +got):\n%s", diff)
	}
	if strings.ContainsAny(tok, "+/=") {
		t.Errorf("state %q is not unpadded base64url", tok)
	}
}

// Every single-bit change of the state string is refused: the string is
// strict base64url (no ignored trailing bits) over a MAC'd payload.
func TestEveryBitFlipIsRefused(t *testing.T) {
	s := newSealer(t, newKey(t))
	tok := seal(t, s, sample(), binding)
	for i := 0; i < len(tok); i++ {
		for bit := 0; bit < 8; bit++ {
			b := []byte(tok)
			b[i] ^= 1 << bit
			if _, err := s.Open(string(b), binding, now); err == nil {
				t.Fatalf("state with bit %d of byte %d flipped was accepted", bit, i)
			}
		}
	}
}

func TestTruncatedAndExtendedStatesAreRefused(t *testing.T) {
	s := newSealer(t, newKey(t))
	tok := seal(t, s, sample(), binding)
	for n := 0; n < len(tok); n++ {
		if _, err := s.Open(tok[:n], binding, now); err == nil {
			t.Fatalf("state truncated to %d of %d characters was accepted", n, len(tok))
		}
	}
	for _, extra := range []string{"A", "AA", "AAAA", "=", " ", "\n"} {
		if _, err := s.Open(tok+extra, binding, now); err == nil {
			t.Errorf("state with %q appended was accepted", extra)
		}
	}
}

func TestStateIsBoundToCallerToolAndArguments(t *testing.T) {
	s := newSealer(t, newKey(t))
	tok := seal(t, s, sample(), binding)
	for name, b := range map[string]requeststate.Binding{
		"another subject":   {Subject: "mallory", Agent: binding.Agent, Tool: binding.Tool, ArgumentsDigest: binding.ArgumentsDigest},
		"another agent":     {Subject: binding.Subject, Agent: "agent-2", Tool: binding.Tool, ArgumentsDigest: binding.ArgumentsDigest},
		"another tool":      {Subject: binding.Subject, Agent: binding.Agent, Tool: "credits_config_set", ArgumentsDigest: binding.ArgumentsDigest},
		"changed arguments": {Subject: binding.Subject, Agent: binding.Agent, Tool: binding.Tool, ArgumentsDigest: "sha256:00fe"},
		// Length prefixes keep fields from sliding into each other.
		"shifted fields": {Subject: binding.Subject + "a", Agent: "gent-1", Tool: binding.Tool, ArgumentsDigest: binding.ArgumentsDigest},
	} {
		if _, err := s.Open(tok, b, now); !errors.Is(err, requeststate.ErrForged) {
			t.Errorf("%s: Open = %v, want ErrForged", name, err)
		}
	}
}

func TestExpiredStateIsRefused(t *testing.T) {
	s := newSealer(t, newKey(t))
	tok := seal(t, s, sample(), binding)
	for _, at := range []time.Time{sample().Expires, sample().Expires.Add(time.Second), now.Add(24 * time.Hour)} {
		if _, err := s.Open(tok, binding, at); !errors.Is(err, requeststate.ErrExpired) {
			t.Errorf("Open at %s = %v, want ErrExpired", at, err)
		}
	}
	if _, err := s.Open(tok, binding, sample().Expires.Add(-time.Second)); err != nil {
		t.Errorf("Open a second before expiry: %v", err)
	}
}

// Rotation: the current key signs; states signed by the previous key still
// open; once a key is neither current nor previous its states are refused.
func TestKeyRotation(t *testing.T) {
	k1, k2, k3 := newKey(t), newKey(t), newKey(t)
	old := seal(t, newSealer(t, k1), sample(), binding)

	rotated := newSealer(t, k2, k1)
	if rotated.KeyID() != k2.ID {
		t.Errorf("rotated sealer signs with %s, want the current key %s", rotated.KeyID(), k2.ID)
	}
	if st, err := rotated.Open(old, binding, now); err != nil || st.KeyID != k1.ID {
		t.Errorf("state of the previous key: Open = %+v, %v; want it accepted, signed by %s", st, err, k1.ID)
	}
	fresh := seal(t, rotated, sample(), binding)
	if st, err := rotated.Open(fresh, binding, now); err != nil || st.KeyID != k2.ID {
		t.Errorf("state of the current key: Open = %+v, %v", st, err)
	}

	retired := newSealer(t, k3, k2)
	if _, err := retired.Open(old, binding, now); !errors.Is(err, requeststate.ErrUnknownKey) {
		t.Errorf("state of a retired key: Open = %v, want ErrUnknownKey", err)
	}
	if _, err := retired.Open(fresh, binding, now); err != nil {
		t.Errorf("state of the now previous key: Open = %v", err)
	}
}

// A key that claims the id of a held key, but is not it, does not verify.
func TestForeignKeyWithSameIDIsRefused(t *testing.T) {
	k := newKey(t)
	s := newSealer(t, k)
	other := newSealer(t, newKey(t))
	tok := seal(t, other, sample(), binding)
	if _, err := s.Open(tok, binding, now); !errors.Is(err, requeststate.ErrUnknownKey) {
		t.Errorf("Open of another deployment's state = %v, want ErrUnknownKey", err)
	}
}

func TestKeyFiles(t *testing.T) {
	k := newKey(t)
	b := requeststate.MarshalKey(k)
	if !bytes.HasPrefix(b, []byte("-----BEGIN TOOLMESH REQUEST STATE KEY-----")) {
		t.Fatalf("key file does not start with its PEM header:\n%s", b)
	}
	back, err := requeststate.ParseKey(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != k.ID {
		t.Errorf("key id after a round trip = %s, want %s (ids derive from the secret)", back.ID, k.ID)
	}
	tok := seal(t, newSealer(t, k), sample(), binding)
	if _, err := newSealer(t, back).Open(tok, binding, now); err != nil {
		t.Errorf("a key read back from its file does not open its states: %v", err)
	}
	for _, bad := range []string{"", "garbage", "-----BEGIN MESH KEY-----\nAAAA\n-----END MESH KEY-----\n",
		"-----BEGIN TOOLMESH REQUEST STATE KEY-----\nAAAA\n-----END TOOLMESH REQUEST STATE KEY-----\n"} {
		if _, err := requeststate.ParseKey([]byte(bad)); err == nil {
			t.Errorf("ParseKey(%q) accepted it", bad)
		}
	}
}

func TestSealRefusesInvalidStates(t *testing.T) {
	s := newSealer(t, newKey(t))
	for name, mutate := range map[string]func(*requeststate.State){
		"round 0":         func(st *requeststate.State) { st.Round = 0 },
		"round too large": func(st *requeststate.State) { st.Round = requeststate.MaxRound + 1 },
		"no workflow":     func(st *requeststate.State) { st.WorkflowID = "" },
		"space in id":     func(st *requeststate.State) { st.WorkflowID = "call/a b" },
		"no run":          func(st *requeststate.State) { st.RunID = "" },
		"no expiry":       func(st *requeststate.State) { st.Expires = time.Time{} },
	} {
		st := sample()
		mutate(&st)
		if _, err := s.Seal(st, binding); err == nil {
			t.Errorf("%s: Seal accepted it", name)
		}
	}
}

func TestDeriveGivesOneSecretPerKeyAndPurpose(t *testing.T) {
	k, other := newKey(t), newKey(t)
	a := k.Derive("toolmesh.session_id.v1")
	if len(a) != 32 {
		t.Fatalf("derived %d bytes, want 32", len(a))
	}
	again, err := requeststate.ParseKey(requeststate.MarshalKey(k))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(again.Derive("toolmesh.session_id.v1"), a) {
		t.Error("the same key file derives another secret")
	}
	if bytes.Equal(k.Derive("another purpose"), a) {
		t.Error("two purposes share a secret")
	}
	if bytes.Equal(other.Derive("toolmesh.session_id.v1"), a) {
		t.Error("two keys derive the same secret")
	}
}
