package a2alink

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

// DepthTokenType is the JOSE "typ" of a depth token: it is never a mesh
// token (mesh.TokenType), though a mesh signs both with its key.
const DepthTokenType = "toolmesh-a2a-depth+jwt"

// Depth token limits.
const (
	// DepthTokenTTL is how long a depth token is accepted after it is
	// signed: long enough for retries, too short to keep.
	DepthTokenTTL = 5 * time.Minute
	maxTokenLen   = 4096
	keysTTL       = 5 * time.Minute
	maxKeysBytes  = 64 << 10
	keysTimeout   = 5 * time.Second
	leeway        = 30 * time.Second
)

// Depth is what a verified depth token says.
type Depth struct {
	// Issuer is the sending mesh's A2A base URL.
	Issuer string
	// Agent is the sending agent.
	Agent string
	// Depth is the invocation depth of the work the message asks for.
	Depth int
}

type depthClaims struct {
	Depth *int `json:"depth"`
}

// DepthSigner signs depth tokens for the messages a mesh sends.
type DepthSigner struct {
	issuer string
	signer jose.Signer
}

// NewDepthSigner returns a signer whose tokens name issuer, the mesh's A2A
// base URL (where its keys are published at KeysPath).
func NewDepthSigner(key ed25519.PrivateKey, issuer string) (*DepthSigner, error) {
	s, iss, err := meshSigner(key, issuer, "depth", DepthTokenType)
	if err != nil {
		return nil, err
	}
	return &DepthSigner{issuer: iss, signer: s}, nil
}

// meshSigner is a signer of tokens of type typ (what names them in errors)
// with the mesh's Ed25519 key, naming the key by its id, and the issuer
// they name: the mesh's A2A base URL, where its keys are published at
// KeysPath.
func meshSigner(key ed25519.PrivateKey, issuer, what, typ string) (jose.Signer, string, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, "", fmt.Errorf("%s signing key: not an Ed25519 private key", what)
	}
	if u, err := url.Parse(issuer); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, "", fmt.Errorf("%s issuer %q: want the mesh's A2A base URL (http or https)", what, issuer)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: key},
		(&jose.SignerOptions{}).WithType(jose.ContentType(typ)).WithHeader(jose.HeaderKey("kid"), mesh.KeyID(key.Public().(ed25519.PublicKey))))
	if err != nil {
		return nil, "", fmt.Errorf("%s signing key: %w", what, err)
	}
	return s, strings.TrimRight(issuer, "/"), nil
}

// Sign returns the token for a message (messageID) that agent sends to the
// agent at audience (its A2A URL, the card's url), asking for work at depth.
func (s *DepthSigner) Sign(audience, agent, messageID string, depth int, now time.Time) (string, error) {
	std := jwt.Claims{
		Issuer:   s.issuer,
		Subject:  agent,
		Audience: jwt.Audience{audience},
		ID:       messageID,
		IssuedAt: jwt.NewNumericDate(now),
		Expiry:   jwt.NewNumericDate(now.Add(DepthTokenTTL)),
	}
	tok, err := jwt.Signed(s.signer).Claims(std).Claims(depthClaims{Depth: &depth}).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign depth: %w", err)
	}
	return tok, nil
}

// DepthError says why a depth token was refused; Field names the part.
type DepthError struct {
	Field  string
	Reason string
}

func (e *DepthError) Error() string { return e.Reason }

func refuse(field, format string, args ...any) error {
	return &DepthError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DepthVerifier checks the depth tokens of inbound messages, fetching each
// issuer's keys (and keeping them a while) through the egress guard.
type DepthVerifier struct {
	keys *KeySets
	now  clock.Clock
}

// NewDepthVerifier returns a verifier that reaches issuers through policy.
func NewDepthVerifier(policy egress.Policy) *DepthVerifier {
	return &DepthVerifier{keys: NewKeySets(policy), now: time.Now}
}

// Verify checks token, which came with message messageID for an agent
// reached at one of audiences (its A2A URLs), and returns what it says.
func (v *DepthVerifier) Verify(ctx context.Context, token, messageID string, audiences ...string) (Depth, error) {
	if len(token) > maxTokenLen {
		return Depth{}, refuse("token", "the depth token is longer than %d bytes", maxTokenLen)
	}
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return Depth{}, refuse("alg", "the depth token is not an EdDSA-signed JWT")
	}
	h := tok.Headers[0]
	if typ, _ := h.ExtraHeaders[jose.HeaderType].(string); typ != DepthTokenType {
		return Depth{}, refuse("typ", "the depth token has type %q, want %q", typ, DepthTokenType)
	}
	// Who claims to have signed it decides where its keys are; the
	// signature then proves it.
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return Depth{}, refuse("claims", "the depth token's claims do not parse")
	}
	issuer := strings.TrimRight(unverified.Issuer, "/")
	if u, err := url.Parse(issuer); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return Depth{}, refuse("iss", "the depth token's issuer is not an http or https URL")
	}
	key, err := v.keys.Key(ctx, issuer+KeysPath, h.KeyID)
	if err != nil {
		if ke, ok := errors.AsType[*KeyError](err); ok {
			return Depth{}, refuse(map[bool]string{true: "kid", false: "iss"}[ke.Unknown], "the depth token's keys: %s", ke.Reason)
		}
		return Depth{}, refuse("iss", "the depth token's keys: %s", err.Error())
	}
	var std jwt.Claims
	var dc depthClaims
	if err := tok.Claims(key, &std, &dc); err != nil {
		return Depth{}, refuse("signature", "the depth token's signature is invalid")
	}
	if std.Expiry == nil || std.IssuedAt == nil {
		return Depth{}, refuse("exp", "the depth token has no expiry or issue time")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{AnyAudience: jwt.Audience(audiences), ID: messageID, Time: v.now()}, leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrExpired):
			return Depth{}, refuse("exp", "the depth token has expired")
		case errors.Is(err, jwt.ErrInvalidAudience):
			return Depth{}, refuse("aud", "the depth token is for another agent")
		case errors.Is(err, jwt.ErrInvalidID):
			return Depth{}, refuse("jti", "the depth token is for another message")
		}
		return Depth{}, refuse("claims", "the depth token's claims are invalid")
	}
	if std.Expiry.Time().Sub(std.IssuedAt.Time()) > DepthTokenTTL+leeway {
		return Depth{}, refuse("exp", "the depth token lives longer than %s", DepthTokenTTL)
	}
	if dc.Depth == nil || *dc.Depth < 0 || *dc.Depth > mesh.MaxDepth {
		return Depth{}, refuse("depth", "the depth token carries no depth between 0 and %d", mesh.MaxDepth)
	}
	return Depth{Issuer: issuer, Agent: std.Subject, Depth: *dc.Depth}, nil
}
