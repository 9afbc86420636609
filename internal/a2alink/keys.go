package a2alink

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/egress"
	"github.com/toolmesh/toolmesh/internal/mesh"
)

// Keys is the JSON Web Key Set a mesh publishes at KeysPath: the public
// halves of the keys its depth tokens, cards and pushes are signed with.
func Keys(pubs ...ed25519.PublicKey) jose.JSONWebKeySet {
	set := jose.JSONWebKeySet{}
	for _, p := range pubs {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: p, KeyID: mesh.KeyID(p), Algorithm: string(jose.EdDSA), Use: "sig"})
	}
	return set
}

// KeyError says why a published key could not be had: the key set could
// not be fetched, or (Unknown) it does not hold the key.
type KeyError struct {
	Reason  string
	Unknown bool
}

func (e *KeyError) Error() string { return e.Reason }

// KeySets fetches the key sets other meshes publish (through the egress
// guard) and keeps each a while; a key id it has not seen makes it fetch
// again (a rotation).
type KeySets struct {
	client *http.Client
	now    clock.Clock

	mu   sync.Mutex
	sets map[string]cachedKeys
}

type cachedKeys struct {
	set     jose.JSONWebKeySet
	fetched time.Time
}

// maxCachedSets bounds the key sets kept.
const maxCachedSets = 256

// NewKeySets returns key sets fetched through policy.
func NewKeySets(policy egress.Policy) *KeySets {
	return &KeySets{client: HTTPClient(policy, keysTimeout, maxKeysBytes), now: time.Now, sets: map[string]cachedKeys{}}
}

// Key returns the Ed25519 key kid of the key set at jwksURL.
func (k *KeySets) Key(ctx context.Context, jwksURL, kid string) (ed25519.PublicKey, error) {
	jwk, err := k.JWK(ctx, jwksURL, kid)
	if err != nil {
		return nil, err
	}
	pub, ok := jwk.Key.(ed25519.PublicKey)
	if !ok {
		return nil, &KeyError{Reason: fmt.Sprintf("the key %q is not an Ed25519 public key", clipURL(kid)), Unknown: true}
	}
	return pub, nil
}

// JWK returns the public key kid of the key set at jwksURL, fetching the
// set when it is not known or is stale, or when kid is new (a rotation).
func (k *KeySets) JWK(ctx context.Context, jwksURL, kid string) (*jose.JSONWebKey, error) {
	now := k.now()
	k.mu.Lock()
	c, ok := k.sets[jwksURL]
	k.mu.Unlock()
	if ok && now.Sub(c.fetched) < keysTTL {
		if jwk, ok := publicKey(c.set, kid); ok {
			return jwk, nil
		}
	}
	set, err := k.fetch(ctx, jwksURL)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	if len(k.sets) >= maxCachedSets {
		clear(k.sets)
	}
	k.sets[jwksURL] = cachedKeys{set: set, fetched: now}
	k.mu.Unlock()
	jwk, ok := publicKey(set, kid)
	if !ok {
		return nil, &KeyError{Reason: fmt.Sprintf("the key set does not hold a public key %q", clipURL(kid)), Unknown: true}
	}
	return jwk, nil
}

func publicKey(set jose.JSONWebKeySet, kid string) (*jose.JSONWebKey, bool) {
	for _, k := range set.Key(kid) {
		if k.Valid() && k.IsPublic() {
			return &k, true
		}
	}
	return nil, false
}

func (k *KeySets) fetch(ctx context.Context, jwksURL string) (jose.JSONWebKeySet, error) {
	ctx, cancel := context.WithTimeout(ctx, keysTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, jwksURL, nil)
	if err != nil {
		return jose.JSONWebKeySet{}, &KeyError{Reason: "the key set's address is not a URL"}
	}
	req.Header.Set("Accept", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return jose.JSONWebKeySet{}, &KeyError{Reason: "the key set could not be fetched: " + egress.DescribeError(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return jose.JSONWebKeySet{}, &KeyError{Reason: fmt.Sprintf("the key set could not be fetched (%s)", resp.Status)}
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return jose.JSONWebKeySet{}, &KeyError{Reason: "the key set is not a JSON Web Key Set"}
	}
	return set, nil
}
