package memory

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// KeySize is the length of the memory encryption key in bytes.
const KeySize = 32

// ParseKey decodes a memory encryption key: 32 random bytes in standard
// base64, with or without padding (what `openssl rand -base64 32` prints).
// The error never repeats the value.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil {
		return nil, errors.New("memory key is not valid base64; want 32 random bytes in base64 (e.g. from `openssl rand -base64 32`)")
	}
	if len(key) != KeySize {
		return nil, fmt.Errorf("memory key decodes to %d bytes; want %d random bytes in base64 (e.g. from `openssl rand -base64 32`)", len(key), KeySize)
	}
	return key, nil
}

// sealer encrypts content with AES-256-GCM and hashes index terms with
// HMAC-SHA256. Both keys, and the key id, are derived from the one
// configured key with HKDF-SHA256, so the index key is never the encryption
// key and the key id reveals nothing about either.
type sealer struct {
	id    string
	aead  cipher.AEAD
	index []byte
}

func newSealer(key []byte) (*sealer, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("memory key has %d bytes, want %d", len(key), KeySize)
	}
	var derived [3][]byte
	for i, d := range []struct {
		info string
		n    int
	}{{"content", 32}, {"index", 32}, {"key id", 8}} {
		k, err := hkdf.Key(sha256.New, key, nil, "toolmesh.memory.v1 "+d.info, d.n)
		if err != nil {
			return nil, fmt.Errorf("derive memory %s key: %w", d.info, err)
		}
		derived[i] = k
	}
	block, err := aes.NewCipher(derived[0])
	if err != nil {
		return nil, fmt.Errorf("memory cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("memory cipher: %w", err)
	}
	return &sealer{id: hex.EncodeToString(derived[2]), aead: aead, index: derived[1]}, nil
}

// seal encrypts plaintext under a fresh random nonce, binding it to aad.
// The result is nonce || ciphertext || tag.
func (s *sealer) seal(plaintext, aad []byte) []byte {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plaintext)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic("memory: crypto/rand failed: " + err.Error())
	}
	return s.aead.Seal(nonce, nonce, plaintext, aad)
}

// errUnauthentic means a sealed body failed GCM authentication: it was
// altered, moved to another row, or sealed with another key.
var errUnauthentic = errors.New("content failed authentication")

func (s *sealer) open(body, aad []byte) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(body) < n+s.aead.Overhead() {
		return nil, errUnauthentic
	}
	out, err := s.aead.Open(nil, body[:n], body[n:], aad)
	if err != nil {
		return nil, errUnauthentic
	}
	return out, nil
}

// term returns the index term of word for agent: a truncated HMAC (96
// bits), so the index holds no plaintext and the same word gives unrelated
// terms for different agents.
func (s *sealer) term(agent, word string) string {
	m := hmac.New(sha256.New, s.index)
	m.Write([]byte(agent))
	m.Write([]byte{0})
	m.Write([]byte(word))
	return letters(m.Sum(nil)[:12])
}

// letters encodes b with one letter a-p per 4 bits. A term of letters only
// is one plain word to every full-text parser (FTS5 unicode61 and the
// PostgreSQL parser would split or reclassify hex such as "3e8f...").
func letters(b []byte) string {
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, 'a'+c>>4, 'a'+c&0x0f)
	}
	return string(out)
}

// contentAAD binds a sealed body to its row, so a body copied to another
// agent or key does not open.
func contentAAD(agent, key string) []byte {
	return []byte("toolmesh.memory.v1 content\x00" + agent + "\x00" + key)
}

var (
	checkPlaintext = []byte("toolmesh.memory.v1 key check")
	checkAAD       = []byte("toolmesh.memory.v1 keyring")
)
