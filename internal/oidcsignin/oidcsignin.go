// Package oidcsignin signs people in with OpenID Connect: the authorization
// code flow with PKCE (S256) and a nonce, against one issuer, for the web
// pages of the mesh (the console, the connections link page). A page keeps
// a Login (sealed, in a cookie of its own) from the redirect to the issuer
// to the callback; Finish checks the callback against it and answers who
// signed in.
package oidcsignin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Config is a client's registration at the issuer.
type Config struct {
	// Issuer is the OpenID provider; its discovery document is read on the
	// first sign-in.
	Issuer string
	// ClientID and ClientSecret are the registration (no secret: a public
	// client, protected by PKCE alone).
	ClientID, ClientSecret string
	// RedirectURL is the callback as browsers reach it.
	RedirectURL string
	// Resource, when set, is asked for as the access token's audience
	// (RFC 8707).
	Resource string
	// Scopes are asked for besides openid.
	Scopes []string
}

// Client signs people in at one issuer.
type Client struct {
	cfg  Config
	http *http.Client

	mu         sync.Mutex
	provider   *oidc.Provider
	endSession string // the issuer's end_session_endpoint, when it has one
}

// New is a client of cfg.Issuer reaching it with hc (http.DefaultClient
// when nil).
func New(cfg Config, hc *http.Client) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{cfg: cfg, http: hc}
}

// Issuer is the issuer's URL.
func (c *Client) Issuer() string { return c.cfg.Issuer }

// EndSession is the issuer's end_session_endpoint ("" when it has none, or
// before the first sign-in).
func (c *Client) EndSession() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endSession
}

// ErrUnreachable: the issuer's discovery document could not be read.
var ErrUnreachable = errors.New("the sign-in service does not answer")

// discover reads the issuer's discovery document once it answers.
func (c *Client) discover(ctx context.Context) (*oidc.Provider, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.provider != nil {
		return c.provider, nil
	}
	p, err := oidc.NewProvider(oidc.ClientContext(ctx, c.http), c.cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	var extra struct {
		EndSession string `json:"end_session_endpoint"`
	}
	_ = p.Claims(&extra)
	c.provider, c.endSession = p, extra.EndSession
	return p, nil
}

func (c *Client) oauth(p *oidc.Provider) *oauth2.Config {
	ep := p.Endpoint()
	// One style, not the library's guess: a guess retries a refused code
	// exchange in the other style.
	ep.AuthStyle = oauth2.AuthStyleInParams
	if c.cfg.ClientSecret != "" {
		ep.AuthStyle = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{ClientID: c.cfg.ClientID, ClientSecret: c.cfg.ClientSecret, Endpoint: ep,
		RedirectURL: c.cfg.RedirectURL, Scopes: append([]string{oidc.ScopeOpenID}, c.cfg.Scopes...)}
}

// Login is one sign-in in progress: what the page keeps, sealed, between
// the redirect to the issuer and the callback.
type Login struct {
	State    string `json:"st"`
	Nonce    string `json:"no"`
	Verifier string `json:"pv"`
}

// NewLogin is a fresh login: a random state and nonce, and a PKCE
// verifier.
func NewLogin() Login {
	return Login{State: RandText(), Nonce: RandText(), Verifier: oauth2.GenerateVerifier()}
}

// Valid reports whether l has what Finish needs.
func (l Login) Valid() bool { return l.State != "" && l.Nonce != "" && l.Verifier != "" }

// AuthURL is the issuer's page that signs the person in for l (S256
// challenge of its verifier, its nonce and state).
func (c *Client) AuthURL(ctx context.Context, l Login) (string, error) {
	p, err := c.discover(ctx)
	if err != nil {
		return "", err
	}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(l.Verifier), oidc.Nonce(l.Nonce)}
	if c.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", c.cfg.Resource))
	}
	return c.oauth(p).AuthCodeURL(l.State, opts...), nil
}

// Person is who signed in.
type Person struct {
	// Subject is the ID token's sub.
	Subject string
	// Roles is its roles claim.
	Roles []string
	// AccessToken is the access token issued with it, and when it expires
	// (zero: not said).
	AccessToken string
	Expiry      time.Time
	// RefreshToken, when the issuer gave one, renews the access token
	// (Refresh) without the person signing in again.
	RefreshToken string
}

// Why a callback signed nobody in.
var (
	// ErrState: the callback's state is not the login's (unknown,
	// foreign, or already used).
	ErrState = errors.New("the sign-in's state is not this browser's")
	// ErrExchange: the issuer did not accept the code.
	ErrExchange = errors.New("the sign-in service did not accept the code")
	// ErrVerify: the ID token did not verify, or carries another nonce.
	ErrVerify = errors.New("the sign-in service's answer did not verify")
)

// IssuerError is the issuer's refusal, as the callback carried it.
type IssuerError struct{ Code, Description string }

func (e *IssuerError) Error() string {
	return "the sign-in service refused the sign-in (" + e.Code + ": " + e.Description + ")"
}

// Finish ends the login l (nil: none was found) with the callback's query
// q: the state must be l's, the code is exchanged with l's verifier, and
// the ID token must verify and carry l's nonce.
func (c *Client) Finish(ctx context.Context, l *Login, q url.Values) (*Person, error) {
	if l == nil || !l.Valid() || q.Get("state") == "" || subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(l.State)) != 1 {
		return nil, ErrState
	}
	if e := q.Get("error"); e != "" {
		return nil, &IssuerError{Code: e, Description: q.Get("error_description")}
	}
	ctx = oidc.ClientContext(ctx, c.http)
	p, err := c.discover(ctx)
	if err != nil {
		return nil, err
	}
	opts := []oauth2.AuthCodeOption{oauth2.VerifierOption(l.Verifier)}
	if c.cfg.Resource != "" {
		opts = append(opts, oauth2.SetAuthURLParam("resource", c.cfg.Resource))
	}
	tok, err := c.oauth(p).Exchange(ctx, q.Get("code"), opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrExchange, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.Verifier(&oidc.Config{ClientID: c.cfg.ClientID}).Verify(ctx, raw)
	if err == nil && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(l.Nonce)) != 1 {
		err = errors.New("the ID token's nonce is not this sign-in's")
	}
	var claims struct {
		Roles []string `json:"roles"`
	}
	if err == nil {
		err = idt.Claims(&claims)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrVerify, err)
	}
	return &Person{Subject: idt.Subject, Roles: claims.Roles, AccessToken: tok.AccessToken, Expiry: tok.Expiry, RefreshToken: tok.RefreshToken}, nil
}

// Token is an access token renewed by Refresh.
type Token struct {
	AccessToken string
	Expiry      time.Time // zero: not said
	// RefreshToken is the one to use next time: the issuer's new one when
	// it rotates them, else the one used.
	RefreshToken string
}

// ErrRefresh: the issuer refused the refresh token (revoked, expired or
// used); the person must sign in again.
var ErrRefresh = errors.New("the sign-in service refused to renew the sign-in")

// Refresh trades refreshToken for a new access token (the refresh_token
// grant). The audience is the one the grant was issued for: issuers keep
// it with the refresh token.
func (c *Client) Refresh(ctx context.Context, refreshToken string) (*Token, error) {
	ctx = oidc.ClientContext(ctx, c.http)
	p, err := c.discover(ctx)
	if err != nil {
		return nil, err
	}
	tok, err := c.oauth(p).TokenSource(ctx, &oauth2.Token{RefreshToken: refreshToken}).Token()
	var refused *oauth2.RetrieveError
	switch {
	case errors.As(err, &refused):
		return nil, fmt.Errorf("%w: %v", ErrRefresh, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrUnreachable, err)
	}
	return &Token{AccessToken: tok.AccessToken, Expiry: tok.Expiry, RefreshToken: tok.RefreshToken}, nil
}

// RandText is 24 random bytes, base64url.
func RandText() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
