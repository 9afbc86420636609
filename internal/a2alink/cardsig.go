package a2alink

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"

	a2apb "github.com/a2aproject/a2a-go/v2/a2apb/v1"
	jose "github.com/go-jose/go-jose/v4"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/jcs"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

// Agent cards are signed as A2A 1.0 §8.4 says: a JWS whose payload is the
// card canonicalized (JCS, RFC 8785) without its signatures, with the
// protected header {"alg","typ":"JOSE","kid","jku"}, kept in the card's
// signatures as {protected, signature}. The canonical form is the one the
// A2A JS SDK computes (canonicalizeAgentCard), so its verifier accepts the
// mesh's cards: the card read as an lf.a2a.v1.AgentCard (fields outside the
// 1.0 schema, such as a 0.3 card's url, dropped), printed as proto JSON,
// and emptied of empty strings, lists and objects. A signature covers
// nothing outside the 1.0 schema.

// CanonicalCard is the payload a signature of the card JSON raw covers.
func CanonicalCard(raw []byte) ([]byte, error) {
	raw, err := scopesAsLists(raw)
	if err != nil {
		return nil, fmt.Errorf("read the card: %w", err)
	}
	var card a2apb.AgentCard
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(raw, &card); err != nil {
		return nil, fmt.Errorf("read the card as an A2A 1.0 card: %w", err)
	}
	card.Signatures = nil
	b, err := protojson.Marshal(&card)
	if err != nil {
		return nil, fmt.Errorf("print the card: %w", err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("print the card: %w", err)
	}
	v, _ = withoutEmpty(v)
	if v == nil {
		return []byte("{}"), nil
	}
	b, err = json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("print the card: %w", err)
	}
	return jcs.Transform(b)
}

// scopesAsLists rewrites the scopes of the card's security requirements
// (its own and its skills') as the proto reads them: a2a-go writes a
// scheme's scopes as a JSON list, the proto (and the JS SDK's reader) as
// {"list": [...]}; like the JS SDK, a value that is not such an object
// reads as no scopes.
func scopesAsLists(raw []byte) ([]byte, error) {
	var card map[string]any
	if err := json.Unmarshal(raw, &card); err != nil {
		return nil, err
	}
	fix := func(reqs any) {
		list, _ := reqs.([]any)
		for _, r := range list {
			m, _ := r.(map[string]any)
			schemes, _ := m["schemes"].(map[string]any)
			for k, v := range schemes {
				if _, ok := v.(map[string]any); !ok {
					schemes[k] = map[string]any{}
				}
			}
		}
	}
	fix(card["securityRequirements"])
	skills, _ := card["skills"].([]any)
	for _, s := range skills {
		if m, ok := s.(map[string]any); ok {
			fix(m["securityRequirements"])
		}
	}
	return json.Marshal(card)
}

// withoutEmpty drops empty strings, nulls, and lists and objects that are
// empty once their own empties are dropped; ok is false for v itself
// empty.
func withoutEmpty(v any) (any, bool) {
	switch t := v.(type) {
	case nil:
		return nil, false
	case string:
		return t, t != ""
	case []any:
		var out []any
		for _, e := range t {
			if c, ok := withoutEmpty(e); ok {
				out = append(out, c)
			}
		}
		return out, len(out) > 0
	case map[string]any:
		out := map[string]any{}
		for k, e := range t {
			if c, ok := withoutEmpty(e); ok {
				out[k] = c
			}
		}
		return out, len(out) > 0
	}
	return v, true
}

// cardHeader is the protected header of a card signature.
type cardHeader struct {
	Alg string `json:"alg"`
	Typ string `json:"typ"`
	Kid string `json:"kid"`
	Jku string `json:"jku,omitempty"`
}

// CardSigner signs the mesh's agent cards with its key, naming where the
// key is published (jku).
type CardSigner struct {
	key       ed25519.PrivateKey
	protected string
}

// NewCardSigner returns a signer whose signatures name jku, the URL of
// the key set that holds key's public half.
func NewCardSigner(key ed25519.PrivateKey, jku string) (*CardSigner, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, errors.New("card signing key: not an Ed25519 private key")
	}
	h, err := json.Marshal(cardHeader{Alg: string(jose.EdDSA), Typ: "JOSE", Kid: mesh.KeyID(key.Public().(ed25519.PublicKey)), Jku: jku})
	if err != nil {
		return nil, err
	}
	return &CardSigner{key: key, protected: base64.RawURLEncoding.EncodeToString(h)}, nil
}

// Sign returns the card JSON raw with its signature added to signatures.
func (s *CardSigner) Sign(raw []byte) ([]byte, error) {
	payload, err := CanonicalCard(raw)
	if err != nil {
		return nil, err
	}
	sig := ed25519.Sign(s.key, []byte(s.protected+"."+base64.RawURLEncoding.EncodeToString(payload)))
	var card map[string]json.RawMessage
	if err := json.Unmarshal(raw, &card); err != nil {
		return nil, fmt.Errorf("read the card: %w", err)
	}
	var sigs []map[string]any
	if old, ok := card["signatures"]; ok {
		if err := json.Unmarshal(old, &sigs); err != nil {
			return nil, fmt.Errorf("read the card's signatures: %w", err)
		}
	}
	sigs = append(sigs, map[string]any{"protected": s.protected, "signature": base64.RawURLEncoding.EncodeToString(sig)})
	if card["signatures"], err = json.Marshal(sigs); err != nil {
		return nil, err
	}
	return json.Marshal(card)
}

// CardVerification says whether a card is signed and whether a signature
// verified.
type CardVerification struct {
	// Signed: the card carries at least one signature.
	Signed bool
	// Verified: a signature verified against a key published at the
	// card's origin.
	Verified bool
	// KeyID and KeysURL name the key of the signature that verified, or
	// of the first.
	KeyID, KeysURL string
	// Reason says why no signature verified (signed and not verified).
	Reason string
}

// cardAlgorithms are the signature algorithms a remote card may use.
var cardAlgorithms = []jose.SignatureAlgorithm{jose.EdDSA, jose.ES256, jose.ES384, jose.RS256, jose.PS256}

// VerifyCard checks the signatures of card against keys published at the
// card's own origin (scheme, host and port): a signature's jku when it is
// there, else <origin>/.well-known/jwks.json. A jku elsewhere is not
// trusted: anyone can publish a key set that holds their own key.
func VerifyCard(ctx context.Context, keys *KeySets, card *Card) CardVerification {
	var sigs []struct {
		Protected string         `json:"protected"`
		Signature string         `json:"signature"`
		Header    map[string]any `json:"header"`
	}
	var doc struct {
		Signatures json.RawMessage `json:"signatures"`
	}
	if json.Unmarshal(card.Raw, &doc) != nil || len(doc.Signatures) == 0 || json.Unmarshal(doc.Signatures, &sigs) != nil || len(sigs) == 0 {
		return CardVerification{}
	}
	out := CardVerification{Signed: true}
	origin, err := url.Parse(card.URL)
	if err != nil {
		out.Reason = "the card's address is not a URL"
		return out
	}
	payload, err := CanonicalCard(card.Raw)
	if err != nil {
		out.Reason = err.Error()
		return out
	}
	encoded := base64.RawURLEncoding.EncodeToString(payload)
	var reasons []string
	for i, sig := range sigs {
		kid, keysURL, err := verifySignature(ctx, keys, origin, sig.Protected, sig.Signature, encoded)
		if i == 0 || err == nil {
			out.KeyID, out.KeysURL = kid, keysURL
		}
		if err == nil {
			out.Verified, out.Reason = true, ""
			return out
		}
		reasons = append(reasons, err.Error())
	}
	out.Reason = clipURL(strings.Join(reasons, "; "))
	return out
}

// verifySignature checks one signature of a card whose payload is encoded.
func verifySignature(ctx context.Context, keys *KeySets, origin *url.URL, protected, signature, encoded string) (kid, keysURL string, err error) {
	hb, err := base64.RawURLEncoding.DecodeString(protected)
	var h cardHeader
	if err != nil || json.Unmarshal(hb, &h) != nil {
		return "", "", errors.New("the signature's protected header is not base64url JSON")
	}
	if h.Kid == "" || h.Alg == "" {
		return h.Kid, "", errors.New("the signature's protected header names no kid or alg")
	}
	keysURL = origin.Scheme + "://" + origin.Host + KeysPath
	if h.Jku != "" {
		ju, err := url.Parse(h.Jku)
		if err != nil || ju.Scheme != origin.Scheme || ju.Host != origin.Host {
			return h.Kid, h.Jku, fmt.Errorf("the signature's key set (jku %s) is not at the card's origin %s://%s", clipURL(h.Jku), origin.Scheme, origin.Host)
		}
		keysURL = h.Jku
	}
	jwk, err := keys.JWK(ctx, keysURL, h.Kid)
	if err != nil {
		return h.Kid, keysURL, err
	}
	jws, err := jose.ParseSignedCompact(protected+"."+encoded+"."+signature, cardAlgorithms)
	if err != nil {
		return h.Kid, keysURL, fmt.Errorf("the signature is not a JWS this mesh checks (%s)", strings.Join(algNames(), ", "))
	}
	if _, err := jws.Verify(jwk); err != nil {
		return h.Kid, keysURL, errors.New("the signature does not verify: the card was changed, or signed with another key")
	}
	return h.Kid, keysURL, nil
}

func algNames() []string {
	out := make([]string, len(cardAlgorithms))
	for i, a := range cardAlgorithms {
		out[i] = string(a)
	}
	return out
}
