// Package identity is how the edge knows who calls it: the OAuth 2.1
// resource server that verifies bearer JWTs (RS256, ES256, and HS256 in
// development), the RFC 9728 protected resource metadata that points
// clients at the authorization server, the grants file, and the Principal a
// verified token becomes, with the scopes and grants that decide which
// tools it may call and the step-up challenge when it lacks one.
package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/toolmesh/toolmesh/internal/bearer"
	"github.com/toolmesh/toolmesh/internal/boundary"
)

// Config makes the edge an OAuth 2.1 resource server: every request to
// /mcp needs a bearer JWT issued by Issuer for Resource.
type Config struct {
	// Issuer is the exact "iss" every token must carry.
	Issuer string
	// Resource is this edge's canonical URI ("https://mcp.example.com/mcp");
	// every token's "aud" must contain it (RFC 8707), and RFC 9728 metadata
	// describes it.
	Resource string
	// AuthorizationServers are listed in the protected resource metadata
	// (default: Issuer).
	AuthorizationServers []string
	// JWKS is a JSON Web Key Set (RSA and P-256 EC public keys) that verifies
	// RS256 and ES256 tokens.
	JWKS []byte
	// HS256Secret verifies HS256 tokens. Development only: the edge refuses it
	// unless bound to loopback.
	HS256Secret []byte
	// Leeway tolerates clock skew on exp, nbf and iat (default 30s).
	Leeway time.Duration
}

// principalKey is where the principal travels in the SDK's TokenInfo.
const principalKey = "toolmesh.principal"

// minHS256SecretLen is the shortest HS256 secret accepted.
const minHS256SecretLen = 32

// Authenticator verifies bearer tokens.
type Authenticator struct {
	cfg      Config
	rsaKeys  []keyEntry
	ecKeys   []keyEntry
	hsSecret []byte
	algs     []jose.SignatureAlgorithm
	metaURL  string
	grants   *Grants
	log      *slog.Logger
}

type keyEntry struct {
	kid string
	key any
}

// New returns the authenticator of cfg; grants (nil: none) adds to what
// each verified token's subject may do.
func New(cfg Config, grants *Grants, log *slog.Logger) (*Authenticator, error) {
	if cfg.Issuer == "" {
		return nil, errors.New("auth: an issuer is required")
	}
	res, err := url.Parse(cfg.Resource)
	if err != nil || res.Scheme == "" || res.Host == "" || res.Fragment != "" {
		return nil, fmt.Errorf("auth: resource %q is not an absolute URI without a fragment", cfg.Resource)
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	if len(cfg.AuthorizationServers) == 0 {
		cfg.AuthorizationServers = []string{cfg.Issuer}
	}
	a := &Authenticator{cfg: cfg, grants: grants, log: log}
	a.metaURL = res.Scheme + "://" + res.Host + "/.well-known/oauth-protected-resource" + strings.TrimSuffix(res.Path, "/")
	if len(cfg.JWKS) > 0 {
		var set jose.JSONWebKeySet
		if err := json.Unmarshal(cfg.JWKS, &set); err != nil {
			return nil, fmt.Errorf("auth: read JWKS: %w", err)
		}
		for _, k := range set.Keys {
			if k.Use != "" && k.Use != "sig" {
				continue
			}
			switch pub := k.Key.(type) {
			case *rsa.PublicKey:
				if pub.N.BitLen() < 2048 {
					return nil, fmt.Errorf("auth: JWKS key %q: RSA keys must have at least 2048 bits", k.KeyID)
				}
				a.rsaKeys = append(a.rsaKeys, keyEntry{k.KeyID, pub})
			case *ecdsa.PublicKey:
				if pub.Curve != elliptic.P256() {
					return nil, fmt.Errorf("auth: JWKS key %q: only P-256 EC keys are accepted (ES256)", k.KeyID)
				}
				a.ecKeys = append(a.ecKeys, keyEntry{k.KeyID, pub})
			default:
				return nil, fmt.Errorf("auth: JWKS key %q: only public RSA and P-256 EC keys are accepted", k.KeyID)
			}
		}
	}
	if len(a.rsaKeys) > 0 {
		a.algs = append(a.algs, jose.RS256)
	}
	if len(a.ecKeys) > 0 {
		a.algs = append(a.algs, jose.ES256)
	}
	if len(cfg.HS256Secret) > 0 {
		if len(cfg.HS256Secret) < minHS256SecretLen {
			return nil, fmt.Errorf("auth: the HS256 secret must be at least %d bytes", minHS256SecretLen)
		}
		a.hsSecret = cfg.HS256Secret
		a.algs = append(a.algs, jose.HS256)
	}
	if len(a.algs) == 0 {
		return nil, errors.New("auth: no verification keys (a JWKS with RS256/ES256 keys, or an HS256 secret in development)")
	}
	return a, nil
}

// Issuer is the issuer every token must come from.
func (a *Authenticator) Issuer() string { return a.cfg.Issuer }

// Resource is the canonical URI every token must be meant for.
func (a *Authenticator) Resource() string { return a.cfg.Resource }

// metadataPath is where RFC 9728 protected resource metadata is served.
const metadataPath = "/.well-known/oauth-protected-resource"

// MetadataPaths are the paths that serve the protected resource metadata:
// the well-known path, and the same followed by the resource's path.
func (a *Authenticator) MetadataPaths() []string {
	paths := []string{metadataPath}
	if res, _ := url.Parse(a.cfg.Resource); strings.TrimSuffix(res.Path, "/") != "" {
		paths = append(paths, metadataPath+strings.TrimSuffix(res.Path, "/"))
	}
	return paths
}

// Metadata serves the protected resource metadata (RFC 9728): the
// resource, its authorization servers and the scopes it understands.
func (a *Authenticator) Metadata() http.Handler {
	return auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               a.cfg.Resource,
		AuthorizationServers:   a.cfg.AuthorizationServers,
		ScopesSupported:        []string{ScopeRead, ScopeWrite, ScopeAdmin},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "toolmesh",
	})
}

// Failure is a refused request: the HTTP status, the WWW-Authenticate
// challenge and a message safe to show (never the token).
type Failure struct {
	Status int
	// Code is the RFC 6750 error: invalid_request, invalid_token,
	// insufficient_scope ("" when no credentials came at all).
	Code   string
	Reason string
	// Scope is the scope list to obtain (insufficient_scope).
	Scope string
}

// Text is the failure as a message to the caller, led by its status.
func (f *Failure) Text() string {
	switch f.Status {
	case http.StatusUnauthorized:
		return "Unauthorized: " + f.Reason
	case http.StatusForbidden:
		return "Forbidden: " + f.Reason
	}
	return "Bad request: " + f.Reason
}

// Challenge renders the WWW-Authenticate header of a failure.
func (a *Authenticator) Challenge(f *Failure) string {
	var parts []string
	if f.Code != "" {
		parts = append(parts, fmt.Sprintf("error=%q", f.Code))
		if f.Reason != "" {
			parts = append(parts, fmt.Sprintf("error_description=%q", strings.ReplaceAll(f.Reason, `"`, "'")))
		}
	}
	if f.Scope != "" {
		parts = append(parts, fmt.Sprintf("scope=%q", f.Scope))
	}
	parts = append(parts, fmt.Sprintf("resource_metadata=%q", a.metaURL))
	return "Bearer " + strings.Join(parts, ", ")
}

// tokenClaims are the claims beyond the registered ones.
type tokenClaims struct {
	Scope   string   `json:"scope"`
	Scp     any      `json:"scp"`
	Roles   []string `json:"roles"`
	AgentID string   `json:"agent_id"`
	// Toolsets narrows the tools the caller reaches through the MCP door
	// to a toolset selection: a string ("tasks,messages") or a list of its
	// items.
	Toolsets any `json:"toolsets"`
}

// maxToolsetsClaim bounds the toolsets claim.
const maxToolsetsClaim = 2048

// toolsetsClaim is the toolsets claim as one selection string ("" when the
// token has none).
func toolsetsClaim(v any) (string, error) {
	var s string
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		s = v
	case []any:
		items := make([]string, 0, len(v))
		for _, x := range v {
			item, ok := x.(string)
			if !ok {
				return "", errors.New("the toolsets claim must be a string or a list of strings")
			}
			items = append(items, item)
		}
		s = strings.Join(items, ",")
	default:
		return "", errors.New("the toolsets claim must be a string or a list of strings")
	}
	if len(s) > maxToolsetsClaim {
		return "", errors.New("the toolsets claim is too long")
	}
	if strings.TrimSpace(s) == "" {
		return "", errors.New("the toolsets claim names no toolset")
	}
	return s, nil
}

// agentPattern bounds agent ids taken from tokens.
var agentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$`)

// headerCritical is the JOSE header listing extensions a verifier must
// understand (RFC 7515 §4.1.11).
const headerCritical jose.HeaderKey = "crit"

// maxBearerLen bounds a presented token before it is parsed.
const maxBearerLen = 16 << 10

// Authenticate checks the request's credentials and returns the caller, and
// the token info the MCP SDK carries it in (see FromTokenInfo).
func (a *Authenticator) Authenticate(r *http.Request) (*Principal, *auth.TokenInfo, *Failure) {
	q := r.URL.Query()
	if q.Has("access_token") || q.Has("token") {
		return nil, nil, &Failure{Status: http.StatusBadRequest, Code: "invalid_request", Reason: "access tokens are accepted only in the Authorization header, never in the query string"}
	}
	raw, err := bearer.Token(r.Header)
	if errors.Is(err, bearer.ErrAmbiguous) {
		// A proxy in front that reads another header than the edge would
		// disagree with it about who is calling: refuse both.
		boundary.LogRejection(r.Context(), a.log, boundary.JWT, []boundary.Violation{{Field: "authorization", Rule: "jwt.single_credential", Message: err.Error()}})
		return nil, nil, &Failure{Status: http.StatusBadRequest, Code: "invalid_request", Reason: err.Error()}
	}
	if err != nil {
		return nil, nil, &Failure{Status: http.StatusUnauthorized, Reason: "this endpoint needs a bearer token"}
	}
	p, info, field, err := a.verify(raw)
	if err != nil {
		boundary.LogRejection(r.Context(), a.log, boundary.JWT, []boundary.Violation{{Field: field, Rule: "jwt." + field, Message: err.Error()}})
		return nil, nil, &Failure{Status: http.StatusUnauthorized, Code: "invalid_token", Reason: err.Error()}
	}
	return p, info, nil
}

// verify checks a raw token; on failure it names the offending part.
func (a *Authenticator) verify(raw string) (*Principal, *auth.TokenInfo, string, error) {
	if len(raw) > maxBearerLen {
		return nil, nil, "token", errors.New("the token is too long")
	}
	tok, err := jwt.ParseSigned(raw, a.algs)
	if err != nil {
		return nil, nil, "alg", errors.New("the token is not a JWT signed with an accepted algorithm")
	}
	h := tok.Headers[0]
	if _, ok := h.ExtraHeaders[headerCritical]; ok {
		// go-jose would refuse it too, as a failed signature check.
		return nil, nil, "crit", errors.New("the token marks header parameters critical (crit), and this edge supports no JOSE extensions")
	}
	var candidates []any
	switch jose.SignatureAlgorithm(h.Algorithm) {
	case jose.HS256:
		candidates = []any{a.hsSecret}
	case jose.RS256:
		candidates = pick(a.rsaKeys, h.KeyID)
	case jose.ES256:
		candidates = pick(a.ecKeys, h.KeyID)
	}
	if len(candidates) == 0 {
		return nil, nil, "kid", errors.New("the token is signed with an unknown key")
	}
	var std jwt.Claims
	var extra tokenClaims
	verified := false
	for _, k := range candidates {
		if err := tok.Claims(k, &std, &extra); err == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, nil, "signature", errors.New("the token signature is invalid")
	}
	if std.Expiry == nil {
		return nil, nil, "exp", errors.New("the token has no expiry")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: a.cfg.Issuer, AnyAudience: jwt.Audience{a.cfg.Resource}}, a.cfg.Leeway); err != nil {
		switch {
		case errors.Is(err, jwt.ErrInvalidIssuer):
			return nil, nil, "iss", errors.New("the token is from an untrusted issuer")
		case errors.Is(err, jwt.ErrInvalidAudience):
			return nil, nil, "aud", errors.New("the token is not meant for this resource")
		case errors.Is(err, jwt.ErrExpired):
			return nil, nil, "exp", errors.New("the token has expired")
		case errors.Is(err, jwt.ErrNotValidYet):
			return nil, nil, "nbf", errors.New("the token is not valid yet")
		case errors.Is(err, jwt.ErrIssuedInTheFuture):
			return nil, nil, "iat", errors.New("the token is issued in the future")
		}
		return nil, nil, "claims", errors.New("the token claims are invalid")
	}
	agent := extra.AgentID
	if agent == "" {
		agent = std.Subject
	}
	if !agentPattern.MatchString(agent) {
		return nil, nil, "agent_id", errors.New("the token names no valid agent (agent_id or sub)")
	}
	if len(std.Subject) > 256 {
		return nil, nil, "sub", errors.New("the token subject is too long")
	}
	for _, r := range extra.Roles {
		if r == "" || len(r) > 64 {
			return nil, nil, "roles", errors.New("a role must be 1 to 64 characters")
		}
	}
	if len(extra.Roles) > 16 {
		return nil, nil, "roles", errors.New("the token has too many roles")
	}
	scopes := strings.Fields(extra.Scope)
	switch v := extra.Scp.(type) {
	case string:
		scopes = append(scopes, strings.Fields(v)...)
	case []any:
		for _, s := range v {
			if str, ok := s.(string); ok {
				scopes = append(scopes, str)
			}
		}
	}
	toolsets, err := toolsetsClaim(extra.Toolsets)
	if err != nil {
		return nil, nil, "toolsets", err
	}
	p := newPrincipal(std.Subject, agent, scopes, extra.Roles, a.grants.lookup(std.Subject))
	p.Toolsets = toolsets
	info := &auth.TokenInfo{
		Scopes:     p.Scopes,
		Expiration: std.Expiry.Time().Add(a.cfg.Leeway), // the SDK checks it again, without leeway
		UserID:     p.LimitKey(),
		Extra:      map[string]any{principalKey: p},
	}
	return p, info, "", nil
}

// pick returns the keys a token with kid may be verified with: the key with
// that id, or every key when the token names none.
func pick(keys []keyEntry, kid string) []any {
	var out []any
	for _, k := range keys {
		if kid == "" || k.kid == kid {
			out = append(out, k.key)
		}
	}
	return out
}
