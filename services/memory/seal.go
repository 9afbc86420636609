package memory

import (
	"crypto/hmac"
	"crypto/sha256"

	"github.com/toolmesh/toolmesh/internal/seal"
)

// KeySize is the length of the memory encryption key in bytes.
const KeySize = seal.KeySize

// ParseKey decodes a memory encryption key: 32 random bytes in standard
// base64, with or without padding (what `openssl rand -base64 32` prints).
// The error never repeats the value.
func ParseKey(s string) ([]byte, error) { return seal.ParseKey("memory key", s) }

// sealer encrypts content with AES-256-GCM (internal/seal) and hashes index
// terms with HMAC-SHA256. Both keys, and the key id, are derived from the
// one configured key, so the index key is never the encryption key and the
// key id reveals nothing about either.
type sealer struct {
	id    string
	s     *seal.Sealer
	index []byte
}

// sealPurpose names memory's keys among those derived from a key.
const sealPurpose = "toolmesh.memory.v1"

func newSealer(key []byte) (*sealer, error) {
	s, err := seal.New(key, sealPurpose)
	if err != nil {
		return nil, err
	}
	index, err := s.Derive("index", 32)
	if err != nil {
		return nil, err
	}
	return &sealer{id: s.KeyID(), s: s, index: index}, nil
}

// seal encrypts plaintext bound to aad.
func (s *sealer) seal(plaintext, aad []byte) []byte { return s.s.Seal(plaintext, aad) }

func (s *sealer) open(body, aad []byte) ([]byte, error) { return s.s.Open(body, aad) }

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
