// Package seal encrypts small secrets and contents at rest with AES-256-GCM
// under keys derived from one configured key: each purpose (a domain's
// "toolmesh.memory.v1", "toolmesh.events.v1 webhook secret") gets keys of
// its own through HKDF-SHA256, and a key id that names the configured key
// without revealing anything about it. A sealed body is bound to what it
// belongs to (its additional data), so a body copied to another row, or
// sealed under another key, does not open.
//
//	s, err := seal.New(key, "toolmesh.events.v1 webhook secret")
//	body := s.Seal([]byte(secret), []byte(subscriptionID))
//	secret, err := s.Open(body, []byte(subscriptionID))
//
// Secrets that must survive a key rotation (upstream tokens) are sealed with
// an Envelope instead: a fresh data key per record, wrapped by the newest of
// several configured key-encryption keys, each of which opens what it
// wrapped.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of a configured key in bytes.
const KeySize = 32

// ParseKey decodes a configured key: KeySize random bytes in standard
// base64, with or without padding (what `openssl rand -base64 32` prints).
// what names the key in errors ("memory key"); the error never repeats the
// value.
func ParseKey(what, s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, fmt.Errorf("%s is not valid base64; want %d random bytes in base64 (e.g. from `openssl rand -base64 %d`)", what, KeySize, KeySize)
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("%s decodes to %d bytes; want %d random bytes in base64 (e.g. from `openssl rand -base64 %d`)", what, len(key), KeySize, KeySize)
	}
	return key, nil
}

// Sealer seals and opens bodies for one purpose.
type Sealer struct {
	purpose string
	key     []byte
	id      string
	aead    cipher.AEAD
}

// New derives the sealer of purpose from key (KeySize bytes).
func New(key []byte, purpose string) (*Sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("%s: the key has %d bytes, want %d", purpose, len(key), KeySize)
	}
	s := &Sealer{purpose: purpose, key: key}
	content, err := s.Derive("content", 32)
	if err != nil {
		return nil, err
	}
	id, err := s.Derive("key id", 8)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(content)
	if err != nil {
		return nil, fmt.Errorf("%s cipher: %w", purpose, err)
	}
	if s.aead, err = cipher.NewGCM(block); err != nil {
		return nil, fmt.Errorf("%s cipher: %w", purpose, err)
	}
	s.id = hex.EncodeToString(id)
	return s, nil
}

// Derive derives n more bytes of key for use info within the purpose (an
// index key, say), never equal to the sealing key.
func (s *Sealer) Derive(info string, n int) ([]byte, error) {
	k, err := hkdf.Key(sha256.New, s.key, nil, s.purpose+" "+info, n)
	if err != nil {
		return nil, fmt.Errorf("derive %s %s key: %w", s.purpose, info, err)
	}
	return k, nil
}

// KeyID names the configured key (16 hex characters), so stored bodies can
// say which key sealed them.
func (s *Sealer) KeyID() string { return s.id }

// Seal encrypts plaintext under a fresh random nonce, binding it to aad.
// The result is nonce || ciphertext || tag.
func (s *Sealer) Seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("seal: crypto/rand failed: " + err.Error())
	}
	return s.aead.Seal(nonce, nonce, plaintext, aad)
}

// ErrUnauthentic means a sealed body failed authentication: it was altered,
// moved to another row, or sealed with another key.
var ErrUnauthentic = errors.New("sealed content failed authentication")

// Open decrypts a body Seal made with the same aad.
func (s *Sealer) Open(body, aad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(body) < n+s.aead.Overhead() {
		return nil, ErrUnauthentic
	}
	out, err := s.aead.Open(nil, body[:n], body[n:], aad)
	if err != nil {
		return nil, ErrUnauthentic
	}
	return out, nil
}
