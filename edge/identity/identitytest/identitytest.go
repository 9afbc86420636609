// Package identitytest is an authorization server for tests: it signs
// access tokens (RS256, ES256, HS256) the way an OAuth issuer would, for
// an edge (or one of its doors) configured to require them.
package identitytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/toolmesh/toolmesh/edge/identity"
)

// Issuer signs access tokens the way an authorization server would.
type Issuer struct {
	URL      string
	RSAKey   *rsa.PrivateKey
	ECKey    *ecdsa.PrivateKey
	HSSecret []byte
}

// NewIssuer is an issuer with fresh keys.
func NewIssuer(t testing.TB) *Issuer {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ek, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Issuer{URL: "https://auth.example.com", RSAKey: rk, ECKey: ek, HSSecret: []byte("dev-secret-0123456789abcdef-0123456789")}
}

// JWKS is the issuer's public key set.
func (i *Issuer) JWKS(t testing.TB) []byte {
	t.Helper()
	b, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: &i.RSAKey.PublicKey, KeyID: "rsa-1", Algorithm: "RS256", Use: "sig"},
		{Key: &i.ECKey.PublicKey, KeyID: "ec-1", Algorithm: "ES256", Use: "sig"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Claims of a test token; zero fields are left out.
type Claims struct {
	Subject  string
	Audience string
	Issuer   string
	Expiry   time.Time
	Scope    string
	AgentID  string
	Roles    []string
	Toolsets string
}

// Sign mints a token with alg (RS256, ES256 or HS256).
func (i *Issuer) Sign(t testing.TB, alg jose.SignatureAlgorithm, c Claims) string {
	t.Helper()
	var key jose.SigningKey
	var kid string
	switch alg {
	case jose.RS256:
		key, kid = jose.SigningKey{Algorithm: alg, Key: i.RSAKey}, "rsa-1"
	case jose.ES256:
		key, kid = jose.SigningKey{Algorithm: alg, Key: i.ECKey}, "ec-1"
	case jose.HS256:
		key = jose.SigningKey{Algorithm: alg, Key: i.HSSecret}
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	return i.Serialize(t, s, c)
}

// Serialize mints a token of c signed by s.
func (i *Issuer) Serialize(t testing.TB, s jose.Signer, c Claims) string {
	t.Helper()
	std := jwt.Claims{Subject: c.Subject, Issuer: c.Issuer, IssuedAt: jwt.NewNumericDate(time.Now().Add(-time.Minute))}
	if c.Audience != "" {
		std.Audience = jwt.Audience{c.Audience}
	}
	if !c.Expiry.IsZero() {
		std.Expiry = jwt.NewNumericDate(c.Expiry)
	}
	extra := map[string]any{}
	if c.Scope != "" {
		extra["scope"] = c.Scope
	}
	if c.AgentID != "" {
		extra["agent_id"] = c.AgentID
	}
	if len(c.Roles) > 0 {
		extra["roles"] = c.Roles
	}
	if c.Toolsets != "" {
		extra["toolsets"] = c.Toolsets
	}
	tok, err := jwt.Signed(s).Claims(std).Claims(extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// Valid are claims an edge at resource accepts.
func (i *Issuer) Valid(resource, subject, scope string) Claims {
	return Claims{Subject: subject, Audience: resource, Issuer: i.URL, Expiry: time.Now().Add(time.Hour), Scope: scope}
}

// AuthConfig makes an edge require the issuer's tokens (the caller fills
// in the resource).
func (i *Issuer) AuthConfig(t testing.TB) *identity.Config {
	return &identity.Config{Issuer: i.URL, JWKS: i.JWKS(t)}
}
