package a2alink_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/a2alink"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

func key(seed string) ed25519.PrivateKey {
	s := sha256.Sum256([]byte(seed))
	return ed25519.NewKeyFromSeed(s[:])
}

// issuer serves the keys of a mesh at KeysPath and counts the fetches.
func issuer(t *testing.T, pubs ...ed25519.PublicKey) (string, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != a2alink.KeysPath {
			http.NotFound(w, r)
			return
		}
		n.Add(1)
		_ = json.NewEncoder(w).Encode(a2alink.Keys(pubs...))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &n
}

var loopback = egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

const (
	aud   = "https://mesh-b.example/a2a/agents/bob"
	msgID = "8a0e3c1e-0001-7000-8000-000000000001"
)

func TestDepthRoundTrip(t *testing.T) {
	k := key("mesh-a")
	url, fetches := issuer(t, k.Public().(ed25519.PublicKey))
	s, err := a2alink.NewDepthSigner(k, url+"/")
	if err != nil {
		t.Fatal(err)
	}
	v := a2alink.NewDepthVerifier(loopback)
	for range 3 {
		tok, err := s.Sign(aud, "alice", msgID, 2, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		got, err := v.Verify(context.Background(), tok, msgID, aud)
		if err != nil {
			t.Fatal(err)
		}
		if got != (a2alink.Depth{Issuer: url, Agent: "alice", Depth: 2}) {
			t.Errorf("Verify = %+v, want alice at depth 2 from %s", got, url)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Errorf("the issuer's keys were fetched %d times for three tokens, want once (kept)", n)
	}
}

func TestDepthRefusals(t *testing.T) {
	k := key("mesh-a")
	url, _ := issuer(t, k.Public().(ed25519.PublicKey))
	s, err := a2alink.NewDepthSigner(k, url)
	if err != nil {
		t.Fatal(err)
	}
	// A signer that claims the issuer but holds another key: what a remote
	// that wants to lower a depth would do.
	forger, err := a2alink.NewDepthSigner(key("mallory"), url)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	good, _ := s.Sign(aud, "alice", msgID, 1, now)
	forged, _ := forger.Sign(aud, "alice", msgID, 0, now)
	expired, _ := s.Sign(aud, "alice", msgID, 1, now.Add(-10*time.Minute))
	meshTok, _ := func() (string, error) {
		ms, err := mesh.NewSigner(k, "edge")
		if err != nil {
			return "", err
		}
		return ms.Mint(mesh.Caller{Agent: "alice"}, now, now.Add(time.Minute))
	}()
	// The right signature over a payload with the depth lowered.
	parts := strings.Split(good, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !strings.Contains(string(payload), `"depth":1`) {
		t.Fatalf("payload %s: %v", payload, err)
	}
	lowered := strings.Replace(string(payload), `"depth":1`, `"depth":0`, 1)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(lowered)) + "." + parts[2]

	v := a2alink.NewDepthVerifier(loopback)
	for _, tc := range []struct {
		name, token, aud, msg, field string
		verifier                     *a2alink.DepthVerifier
	}{
		{"signed with another key", forged, aud, msgID, "kid", v},
		{"for another agent", good, "https://mesh-b.example/a2a/agents/carol", msgID, "aud", v},
		{"for another message", good, aud, "another-message", "jti", v},
		{"expired", expired, aud, msgID, "exp", v},
		{"a mesh token", meshTok, aud, msgID, "typ", v},
		{"tampered", tampered, aud, msgID, "signature", v},
		{"not a JWT", "depth=0", aud, msgID, "alg", v},
		{"issuer on a refused address", good, aud, msgID, "iss", a2alink.NewDepthVerifier(egress.Policy{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.verifier.Verify(context.Background(), tc.token, tc.msg, tc.aud)
			var de *a2alink.DepthError
			if !errors.As(err, &de) || de.Field != tc.field {
				t.Errorf("Verify = %v, want a DepthError on %s", err, tc.field)
			}
		})
	}
}
