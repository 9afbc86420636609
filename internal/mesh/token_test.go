package mesh

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func newSigner(t *testing.T) *Signer {
	t.Helper()
	_, s := newKeyedSigner(t)
	return s
}

// newKeyedSigner returns a new signer and its private key.
func newKeyedSigner(t *testing.T) (ed25519.PrivateKey, *Signer) {
	t.Helper()
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(key, "test")
	if err != nil {
		t.Fatal(err)
	}
	return key, s
}

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestMintVerifyRoundTrip(t *testing.T) {
	s := newSigner(t)
	want := Caller{Subject: "user-1", Agent: "a1", Roles: []string{RoleOwner}, Depth: 2, Grants: []string{"toolmesh:write", "toolmesh:tool:github_star_repo"}}
	tok, err := s.Mint(want, now, now.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Verifier().Verify(tok, now.Add(time.Second))
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("caller (-want +got):\n%s", diff)
	}
}

func TestTheMostGrantsFitAToken(t *testing.T) {
	s := newSigner(t)
	grants := make([]string, MaxGrants)
	for i := range grants {
		grants[i] = "toolmesh:tool:" + strings.Repeat("x", MaxGrantLen-len("toolmesh:tool:")-3) + strconv.Itoa(100+i)
	}
	c := Caller{Subject: strings.Repeat("s", maxIDLen), Agent: strings.Repeat("a", maxAgentLen), Grants: grants}
	tok, err := s.Mint(c, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verifier().Verify(tok, now); err != nil {
		t.Errorf("a token with %d grants of %d bytes (%d bytes) is refused: %v", MaxGrants, MaxGrantLen, len(tok), err)
	}
	if _, err := s.Mint(Caller{Agent: "a1", Grants: append(grants, "one more")}, now, now.Add(time.Minute)); err == nil {
		t.Errorf("a caller with %d grants was minted a token", MaxGrants+1)
	}
}

func TestMintNeverOutlivesExpiry(t *testing.T) {
	s := newSigner(t)
	exp := now.Add(1500 * time.Millisecond) // the call deadline
	tok, err := s.Mint(Caller{Agent: "a1"}, now, exp)
	if err != nil {
		t.Fatal(err)
	}
	// Past the deadline plus the verifier's skew allowance, the token is dead.
	if _, err := s.Verifier().Verify(tok, exp.Add(leeway+time.Second)); err == nil {
		t.Fatal("token still valid after its deadline")
	}
}

// forge builds a compact JWS with any header and claims and an HMAC-SHA256
// signature under secret (or no signature when secret is nil).
func forge(header, claims string, secret []byte) string {
	enc := base64.RawURLEncoding.EncodeToString
	signing := enc([]byte(header)) + "." + enc([]byte(claims))
	if secret == nil {
		return signing + "."
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(signing))
	return signing + "." + enc(m.Sum(nil))
}

func TestVerifyRefusesBadTokens(t *testing.T) {
	s := newSigner(t)
	other := newSigner(t)
	valid, err := s.Mint(Caller{Subject: "u", Agent: "a1"}, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	fromOther, err := other.Mint(Caller{Subject: "u", Agent: "a1"}, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(valid, ".")
	claimsJSON := `{"aud":"toolmesh-mesh","sub":"u","agent":"a1","exp":` + strconv.FormatInt(now.Add(time.Minute).Unix(), 10) + `}`
	kid := KeyID(s.PublicKey())
	cases := map[string]struct {
		token string
		at    time.Time
		field string
	}{
		"expired":         {valid, now.Add(2 * time.Minute), "exp"},
		"other key":       {fromOther, now, "kid"},
		"tampered claims": {parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(claimsJSON, `"a1"`, `"admin"`, 1))) + "." + parts[2], now, "signature"},
		"alg none":        {forge(`{"alg":"none","typ":"toolmesh-mesh+jwt","kid":"`+kid+`"}`, claimsJSON, nil), now, "alg"},
		// HS256 keyed with the public key bytes: the classic algorithm confusion.
		"hs256 with public key": {forge(`{"alg":"HS256","typ":"toolmesh-mesh+jwt","kid":"`+kid+`"}`, claimsJSON, s.PublicKey()), now, "alg"},
		"garbage":               {"not-a-token", now, "alg"},
		"too long":              {strings.Repeat("a", maxTokenLen+1), now, "token"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := s.Verifier().Verify(c.token, c.at)
			var te *TokenError
			if !errors.As(err, &te) {
				t.Fatalf("Verify = %v, want a TokenError", err)
			}
			if te.Field != c.field {
				t.Errorf("field = %q, want %q (%v)", te.Field, c.field, err)
			}
			if strings.Contains(err.Error(), c.token[:min(len(c.token), 20)]) && len(c.token) > 20 {
				t.Errorf("error %q contains the token", err)
			}
		})
	}
}

func TestVerifyWrongAudienceOrType(t *testing.T) {
	key, s := newKeyedSigner(t)
	// A token signed by the right key but for another audience must not pass.
	tok, err := s.Mint(Caller{Agent: "a1"}, now, now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Verifier().Verify(tok, now); err != nil {
		t.Fatalf("control token refused: %v", err)
	}
	parts := strings.Split(tok, ".")
	sig := ed25519.Sign(key, []byte(parts[0]+"."+base64.RawURLEncoding.EncodeToString([]byte(`{"aud":"elsewhere","agent":"a1","exp":`+strconv.FormatInt(now.Add(time.Minute).Unix(), 10)+`}`))))
	wrongAud := parts[0] + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"aud":"elsewhere","agent":"a1","exp":`+strconv.FormatInt(now.Add(time.Minute).Unix(), 10)+`}`)) + "." + base64.RawURLEncoding.EncodeToString(sig)
	if _, err := s.Verifier().Verify(wrongAud, now); err == nil || err.(*TokenError).Field != "aud" {
		t.Errorf("wrong audience: Verify = %v, want an aud error", err)
	}
}

func TestVerifierAcceptsRotatedKeys(t *testing.T) {
	oldKey, newKey := newSigner(t), newSigner(t)
	v := NewVerifier(oldKey.PublicKey(), newKey.PublicKey())
	for _, s := range []*Signer{oldKey, newKey} {
		tok, err := s.Mint(Caller{Agent: "a1"}, now, now.Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.Verify(tok, now); err != nil {
			t.Errorf("Verify during rotation: %v", err)
		}
	}
}

func TestMintRefusesCallerWithoutAgent(t *testing.T) {
	if _, err := newSigner(t).Mint(Caller{Subject: "u"}, now, now.Add(time.Minute)); err == nil {
		t.Fatal("minted a token without an agent")
	}
}

func TestKeyFilesRoundTrip(t *testing.T) {
	key, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	privPEM, err := MarshalPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := MarshalPublicKey(key.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	gotKey, err := ParsePrivateKey(privPEM)
	if err != nil {
		t.Fatal(err)
	}
	if !gotKey.Equal(key) {
		t.Error("private key changed in the round trip")
	}
	pubs, err := ParsePublicKeys(append(append([]byte{}, pubPEM...), pubPEM...))
	if err != nil {
		t.Fatal(err)
	}
	if len(pubs) != 2 || !pubs[0].Equal(key.Public()) {
		t.Errorf("ParsePublicKeys = %d keys, want 2 equal to the original", len(pubs))
	}
	if _, err := ParsePublicKeys(privPEM); err == nil {
		t.Error("ParsePublicKeys accepted a private key file")
	}
}

func TestMintForReusesOnlyTokensThatEndByTheDeadline(t *testing.T) {
	s := newSigner(t)
	v := s.Verifier()
	a1 := Caller{Subject: "u", Agent: "a1"}
	first, err := s.MintFor(a1, now, now.Add(15*time.Second), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	expiry := func(t *testing.T, tok string, at time.Time) time.Time {
		t.Helper()
		_, exp, err := v.verify(tok, at)
		if err != nil {
			t.Fatal(err)
		}
		return exp
	}
	cases := []struct {
		name     string
		caller   Caller
		at       time.Time
		deadline time.Time
		reuse    bool
	}{
		{"a later call of the same caller", a1, now.Add(2 * time.Second), now.Add(17 * time.Second), true},
		{"a call with an earlier deadline", a1, now.Add(2 * time.Second), now.Add(10 * time.Second), false},
		{"a token too close to expiry", a1, now.Add(12 * time.Second), now.Add(27 * time.Second), false},
		{"another agent", Caller{Subject: "u", Agent: "a2"}, now.Add(time.Second), now.Add(16 * time.Second), false},
		{"another depth", Caller{Subject: "u", Agent: "a1", Depth: 1}, now.Add(time.Second), now.Add(16 * time.Second), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := s.MintFor(c.caller, c.at, c.deadline, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if (tok == first) != c.reuse {
				t.Errorf("reused = %v, want %v", tok == first, c.reuse)
			}
			if exp := expiry(t, tok, c.at); exp.After(c.deadline) {
				t.Errorf("token expires at %v, after the call deadline %v", exp, c.deadline)
			}
			got, err := v.Verify(tok, c.at)
			if err != nil || got.Agent != c.caller.Agent || got.Depth != c.caller.Depth {
				t.Errorf("Verify = %+v, %v; want %+v", got, err, c.caller)
			}
		})
	}
}

func TestVerifyRemembersOnlyUntilExpiry(t *testing.T) {
	s := newSigner(t)
	v := s.Verifier()
	tok, err := s.Mint(Caller{Agent: "a1"}, now, now.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok, now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok, now.Add(time.Minute)); err == nil {
		t.Error("a remembered token passed after it expired")
	}
}

// TestVerifyNamesARefusedCriticalHeader: a correctly signed token that
// marks a header parameter critical is refused for that, not for a bad
// signature.
func TestVerifyNamesARefusedCriticalHeader(t *testing.T) {
	key, s := newKeyedSigner(t)
	enc := base64.RawURLEncoding.EncodeToString
	header := `{"alg":"EdDSA","typ":"toolmesh-mesh+jwt","kid":"` + KeyID(s.PublicKey()) + `","crit":["exp"],"exp":1}`
	claims := `{"aud":"toolmesh-mesh","sub":"u","agent":"a1","exp":` + strconv.FormatInt(now.Add(time.Minute).Unix(), 10) + `}`
	signing := enc([]byte(header)) + "." + enc([]byte(claims))
	tok := signing + "." + enc(ed25519.Sign(key, []byte(signing)))
	_, err := s.Verifier().Verify(tok, now)
	var te *TokenError
	if !errors.As(err, &te) || te.Field != "crit" || !strings.Contains(err.Error(), "critical header") {
		t.Errorf("Verify of a token with crit = %v, want a crit error naming the critical header", err)
	}
}
