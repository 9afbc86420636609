package a2alink

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// A push (an event of a task POSTed to a webhook) is signed: it carries a
// JWT signed with the mesh's key, in the header PushSignatureHeader —
// and, when the webhook's config asked for a Bearer token without giving
// one, as that token (Authorization: Bearer, the flow A2A's push
// notification guidance describes):
//
//	header: {"alg":"EdDSA","kid":"<key id>","typ":"toolmesh-a2a-push+jwt"}
//	claims: {"iss":"<the mesh's A2A base URL>","aud":"<the webhook URL>",
//	         "jti":"<the event id>","task_id":"...","seq":3,
//	         "body_sha256":"<base64url SHA-256 of the body>","iat":<unix>,"exp":<unix>}
//
// A receiver fetches the keys from <iss>/.well-known/jwks.json, checks the
// signature, that aud is its own URL, that the body's hash is body_sha256
// and that the token has not expired, and dedupes by jti: a push may come
// more than once.

// PushTokenType is the JOSE "typ" of a push's signature.
const PushTokenType = "toolmesh-a2a-push+jwt"

// PushSignatureHeader is the header a push carries its signature in.
const PushSignatureHeader = "X-Toolmesh-Signature"

// PushEventIDHeader carries a push's event id beside its body, for a
// receiver that dedupes without reading the body.
const PushEventIDHeader = "X-Toolmesh-Event-Id"

// PushTokenTTL is how long a push's signature is valid after it is made.
const PushTokenTTL = 5 * time.Minute

// PushClaims is what a push's signature says.
type PushClaims struct {
	jwt.Claims
	TaskID     string `json:"task_id"`
	Seq        int64  `json:"seq"`
	BodySHA256 string `json:"body_sha256"`
}

// PushSigner signs pushes with the mesh's key.
type PushSigner struct {
	issuer string
	signer jose.Signer
}

// NewPushSigner returns a signer whose signatures name issuer, the mesh's
// A2A base URL (its keys are published below it at KeysPath).
func NewPushSigner(key ed25519.PrivateKey, issuer string) (*PushSigner, error) {
	s, iss, err := meshSigner(key, issuer, "push", PushTokenType)
	if err != nil {
		return nil, err
	}
	return &PushSigner{issuer: iss, signer: s}, nil
}

// Sign returns the signature of the push of event seq of task, with body,
// to the webhook at webhook.
func (s *PushSigner) Sign(webhook, taskID string, seq int64, body []byte, now time.Time) (string, error) {
	sum := sha256.Sum256(body)
	c := PushClaims{
		Claims: jwt.Claims{Issuer: s.issuer, Audience: jwt.Audience{webhook}, ID: EventID(taskID, seq),
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(PushTokenTTL))},
		TaskID: taskID, Seq: seq, BodySHA256: base64.RawURLEncoding.EncodeToString(sum[:]),
	}
	tok, err := jwt.Signed(s.signer).Claims(c).Serialize()
	if err != nil {
		return "", fmt.Errorf("sign push: %w", err)
	}
	return tok, nil
}

// VerifyPush checks the signature of a push a webhook at webhook received
// with body, fetching the keys of the mesh that claims to have sent it,
// and returns what it says.
func VerifyPush(ctx context.Context, keys *KeySets, token, webhook string, body []byte, now time.Time) (*PushClaims, error) {
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		return nil, errors.New("the push signature is not an EdDSA-signed JWT")
	}
	if typ, _ := tok.Headers[0].ExtraHeaders[jose.HeaderType].(string); typ != PushTokenType {
		return nil, fmt.Errorf("the push signature has type %q, want %q", typ, PushTokenType)
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, errors.New("the push signature's claims do not parse")
	}
	key, err := keys.Key(ctx, strings.TrimRight(unverified.Issuer, "/")+KeysPath, tok.Headers[0].KeyID)
	if err != nil {
		return nil, fmt.Errorf("the push signature's key: %w", err)
	}
	var c PushClaims
	if err := tok.Claims(key, &c); err != nil {
		return nil, errors.New("the push signature does not verify")
	}
	if err := c.ValidateWithLeeway(jwt.Expected{AnyAudience: jwt.Audience{webhook}, Time: now}, leeway); err != nil {
		return nil, fmt.Errorf("the push signature's claims: %w", err)
	}
	sum := sha256.Sum256(body)
	if c.BodySHA256 != base64.RawURLEncoding.EncodeToString(sum[:]) {
		return nil, errors.New("the push body is not the one signed")
	}
	return &c, nil
}
