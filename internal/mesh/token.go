package mesh

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/toolmesh/toolmesh/internal/keyfile"
)

// The mesh token is a compact JWS (a JWT) signed with Ed25519 ("EdDSA"):
//
//	header: {"alg":"EdDSA","kid":"<key id>","typ":"toolmesh-mesh+jwt"}
//	claims: {"iss":"<minter>","sub":"<subject>","aud":"toolmesh-mesh",
//	         "agent":"<agent id>","roles":["owner"],"depth":0,
//	         "grants":["toolmesh:write","toolmesh:tool:github_star_repo"],
//	         "iat":<unix>,"exp":<unix>}
//
// The explicit typ and audience keep a mesh token from being accepted where a
// caller's OAuth token is expected, and the reverse.
const (
	// TokenType is the JOSE "typ" of a mesh token.
	TokenType = "toolmesh-mesh+jwt"
	// Audience is the "aud" of every mesh token.
	Audience = "toolmesh-mesh"
)

// headerCritical is the JOSE header listing extensions a verifier must
// understand (RFC 7515 §4.1.11); mesh tokens use none.
const headerCritical jose.HeaderKey = "crit"

// MaxGrants and MaxGrantLen bound the grants a token carries
// (Caller.Grants): how many, and the bytes of each.
const (
	MaxGrants   = 48
	MaxGrantLen = 80
)

// maxTokenLen bounds a presented token before it is parsed (room for
// MaxGrants grants).
const maxTokenLen = 8192

// leeway tolerates clock skew between the minter and the verifier.
const leeway = 5 * time.Second

// Limits on what a token may carry.
const (
	maxIDLen    = 256
	maxRoles    = 16
	maxRoleLen  = 64
	maxAgentLen = 128
)

// claims are the mesh-specific claims next to the registered ones.
type claims struct {
	Agent  string   `json:"agent"`
	Roles  []string `json:"roles,omitempty"`
	Depth  int      `json:"depth"`
	Grants []string `json:"grants,omitempty"`
}

// KeyID derives the key id ("kid") of a public key: the first 16 characters
// of the base64url SHA-256 of the key. Rotation needs no configuration: a
// verifier holding several public keys picks the one the token names.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return base64.RawURLEncoding.EncodeToString(sum[:])[:16]
}

// Signer mints mesh tokens. Only the edge, workers and the CLI hold one.
type Signer struct {
	issuer string
	kid    string
	pub    ed25519.PublicKey
	signer jose.Signer

	mu     sync.Mutex
	minted map[string]mintedToken
}

type mintedToken struct {
	token string
	exp   time.Time
}

// maxMinted bounds the tokens MintFor keeps for reuse.
const maxMinted = 4096

// NewSigner returns a signer for key. issuer names the minter in the "iss"
// claim ("toolmesh-edge", "toolmesh-cli", ...).
func NewSigner(key ed25519.PrivateKey, issuer string) (*Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("mesh signing key: not an Ed25519 private key")
	}
	pub := key.Public().(ed25519.PublicKey)
	kid := KeyID(pub)
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{}).WithType(TokenType).WithHeader(jose.HeaderKey("kid"), kid))
	if err != nil {
		return nil, fmt.Errorf("mesh signing key: %w", err)
	}
	return &Signer{issuer: issuer, kid: kid, pub: pub, signer: s, minted: map[string]mintedToken{}}, nil
}

// PublicKey is the public half of the signing key, for verifiers.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.pub }

// Verifier returns a verifier that accepts this signer's tokens.
func (s *Signer) Verifier() *Verifier { return NewVerifier(s.pub) }

// Mint returns a token for c that expires at exp (rounded down to the
// second, so it never outlives exp).
func (s *Signer) Mint(c Caller, now, exp time.Time) (string, error) {
	if err := checkCaller(c); err != nil {
		return "", err
	}
	if !exp.After(now) {
		return "", errors.New("mint mesh token: expiry is not in the future")
	}
	std := jwt.Claims{
		Issuer:   s.issuer,
		Subject:  c.Subject,
		Audience: jwt.Audience{Audience},
		IssuedAt: jwt.NewNumericDate(now.Truncate(time.Second)),
		Expiry:   jwt.NewNumericDate(exp.Truncate(time.Second)),
	}
	tok, err := jwt.Signed(s.signer).Claims(std).Claims(claims{Agent: c.Agent, Roles: c.Roles, Depth: c.Depth, Grants: c.Grants}).Serialize()
	if err != nil {
		return "", fmt.Errorf("mint mesh token: %w", err)
	}
	return tok, nil
}

// MintFor returns a token for c for a call with deadline: one that expires
// no later than the deadline and is still valid for at least fresh. A token
// minted for an earlier call of the same caller is reused while it
// qualifies, so a busy caller costs one signature (and, at the service, one
// verification) per token lifetime rather than per call; a new token lives
// until deadline.
func (s *Signer) MintFor(c Caller, now, deadline time.Time, fresh time.Duration) (string, error) {
	key := callerKey(c)
	s.mu.Lock()
	m, ok := s.minted[key]
	s.mu.Unlock()
	if ok && !m.exp.After(deadline) && m.exp.Sub(now) >= fresh {
		return m.token, nil
	}
	tok, err := s.Mint(c, now, deadline)
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	if len(s.minted) >= maxMinted {
		clear(s.minted)
	}
	s.minted[key] = mintedToken{token: tok, exp: deadline.Truncate(time.Second)}
	s.mu.Unlock()
	return tok, nil
}

// callerKey identifies everything a token says about its caller.
func callerKey(c Caller) string {
	return c.Subject + "\x00" + c.Agent + "\x00" + strings.Join(c.Roles, ",") + "\x00" + strconv.Itoa(c.Depth) + "\x00" + strings.Join(c.Grants, ",")
}

func checkCaller(c Caller) error {
	switch {
	case c.Agent == "":
		return errors.New("the token has no agent")
	case len(c.Agent) > maxAgentLen:
		return fmt.Errorf("the agent is longer than %d bytes", maxAgentLen)
	case len(c.Subject) > maxIDLen:
		return fmt.Errorf("the subject is longer than %d bytes", maxIDLen)
	case c.Depth < 0 || c.Depth > MaxDepth:
		return fmt.Errorf("the depth must be between 0 and %d", MaxDepth)
	case len(c.Roles) > maxRoles:
		return fmt.Errorf("the token has more than %d roles", maxRoles)
	}
	for _, r := range c.Roles {
		if r == "" || len(r) > maxRoleLen {
			return fmt.Errorf("a role must be 1 to %d bytes", maxRoleLen)
		}
	}
	if len(c.Grants) > MaxGrants {
		return fmt.Errorf("the token has more than %d grants", MaxGrants)
	}
	for _, g := range c.Grants {
		if g == "" || len(g) > MaxGrantLen {
			return fmt.Errorf("a grant must be 1 to %d bytes", MaxGrantLen)
		}
	}
	return nil
}

// Verifier checks mesh tokens. Services hold one, built from the mesh's
// public keys only.
type Verifier struct {
	keys map[string]ed25519.PublicKey

	// verified remembers tokens that passed, until they expire: a minter
	// reuses a token for the calls of one caller while it is fresh (see
	// Signer.MintFor), so most calls skip the signature check.
	mu       sync.Mutex
	verified map[string]verifiedToken
}

type verifiedToken struct {
	caller Caller
	exp    time.Time
}

// maxVerified bounds the remembered tokens.
const maxVerified = 4096

// NewVerifier returns a verifier accepting tokens signed by any of keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: map[string]ed25519.PublicKey{}, verified: map[string]verifiedToken{}}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	return v
}

// TokenError says why a presented mesh token was refused. Field names the
// offending part ("exp", "aud", "signature", ...); the message never contains
// the token.
type TokenError struct {
	Field  string
	Reason string
}

func (e *TokenError) Error() string { return e.Reason }

func tokenErr(field, format string, args ...any) error {
	return &TokenError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Verify checks token at time now and returns the caller it carries.
func (v *Verifier) Verify(token string, now time.Time) (Caller, error) {
	v.mu.Lock()
	hit, ok := v.verified[token]
	v.mu.Unlock()
	if ok && !now.After(hit.exp.Add(leeway)) {
		return hit.caller, nil
	}
	c, exp, err := v.verify(token, now)
	if err != nil {
		return Caller{}, err
	}
	v.mu.Lock()
	if len(v.verified) >= maxVerified {
		for k, t := range v.verified {
			if now.After(t.exp.Add(leeway)) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified)
		}
	}
	v.verified[token] = verifiedToken{caller: c, exp: exp}
	v.mu.Unlock()
	return c, nil
}

func (v *Verifier) verify(token string, now time.Time) (Caller, time.Time, error) {
	fail := func(err error) (Caller, time.Time, error) { return Caller{}, time.Time{}, err }
	if len(token) > maxTokenLen {
		return fail(tokenErr("token", "the token is longer than %d bytes", maxTokenLen))
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return fail(tokenErr("alg", "the token is not an EdDSA-signed JWT"))
	}
	h := tok.Headers[0]
	if _, ok := h.ExtraHeaders[headerCritical]; ok {
		return fail(tokenErr("crit", "the token has critical header parameters (crit), which mesh tokens never use"))
	}
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != TokenType {
		return fail(tokenErr("typ", "the token is not a mesh token (typ %q)", typ))
	}
	key, ok := v.keys[h.KeyID]
	if !ok {
		return fail(tokenErr("kid", "the token is signed with an unknown key"))
	}
	var std jwt.Claims
	var c claims
	if err := tok.Claims(key, &std, &c); err != nil {
		return fail(tokenErr("signature", "the token signature is invalid"))
	}
	if std.Expiry == nil {
		return fail(tokenErr("exp", "the token has no expiry"))
	}
	if err := std.ValidateWithLeeway(jwt.Expected{AnyAudience: jwt.Audience{Audience}, Time: now}, leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return fail(tokenErr("exp", "the token has expired"))
		case errors.Is(err, jwt.ErrInvalidAudience):
			return fail(tokenErr("aud", "the token is not meant for the mesh"))
		case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
			return fail(tokenErr("iat", "the token is not valid yet"))
		}
		return fail(tokenErr("claims", "the token claims are invalid"))
	}
	caller := Caller{Subject: std.Subject, Agent: c.Agent, Roles: c.Roles, Depth: c.Depth, Grants: c.Grants}
	if err := checkCaller(caller); err != nil {
		return fail(tokenErr("claims", "%s", err.Error()))
	}
	if caller.Subject == "" {
		caller.Subject = caller.Agent
	}
	return caller, std.Expiry.Time(), nil
}

// GenerateKey returns a new Ed25519 mesh signing key.
func GenerateKey() (ed25519.PrivateKey, error) { return keyfile.Generate() }

// MarshalPrivateKey encodes key as a PKCS #8 "PRIVATE KEY" PEM block.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) { return keyfile.MarshalPrivate(key) }

// MarshalPublicKey encodes key as a PKIX "PUBLIC KEY" PEM block.
func MarshalPublicKey(key ed25519.PublicKey) ([]byte, error) { return keyfile.MarshalPublic(key) }

// ParsePrivateKey decodes a PKCS #8 PEM Ed25519 private key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	k, err := keyfile.ParsePrivate(data)
	if err != nil {
		return nil, fmt.Errorf("mesh key: %w", err)
	}
	return k, nil
}

// ParsePublicKeys decodes one or more PKIX PEM Ed25519 public keys (several
// during a key rotation).
func ParsePublicKeys(data []byte) ([]ed25519.PublicKey, error) {
	keys, err := keyfile.ParsePublic(data)
	if err != nil {
		return nil, fmt.Errorf("mesh public key: %w", err)
	}
	return keys, nil
}
