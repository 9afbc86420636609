// Package requeststate seals and opens the requestState of multi-round
// elicitation (MCP MRTR, SEP-2322): the opaque string a server hands a client
// with its questions and the client echoes back, untouched, with its
// answers. The edge keeps nothing between rounds, so the state says where the
// call lives (its workflow id and run id) and which round it is; the HMAC
// makes it unforgeable and binds it to one caller, one tool and one set of
// arguments.
//
// A state is the unpadded base64url encoding of
//
//	version        1 byte, 1
//	key id         1 length byte (1..32) + the id ([A-Za-z0-9_-])
//	expiry         8 bytes, big-endian Unix seconds
//	round          4 bytes, big-endian, 1..MaxRound
//	workflow id    2 length bytes (1..MaxIDLen) + the id (printable ASCII)
//	run id         1 length byte (1..128) + the id (printable ASCII)
//	MAC            32 bytes
//
// where the MAC is HMAC-SHA256, under the key the key id names, of a domain
// separation string, everything before the MAC, and — each prefixed with its
// length — the caller's subject and agent, the tool name and the digest of
// the canonical arguments. None of those four travel in the state: the edge
// takes them from the request that carries it, so a state presented by
// another caller, for another tool or with other arguments does not verify.
//
// The state is signed, not encrypted: it carries nothing secret.
package requeststate

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// Version is the format version this package writes.
const Version = 1

// Limits of the fields of a state.
const (
	MaxRound    = 1 << 20
	MaxIDLen    = 512
	maxKeyIDLen = 32
	maxRunIDLen = 128
	macLen      = sha256.Size
	// MaxLen bounds the length of a state string; anything longer is
	// refused before it is decoded.
	MaxLen = 1024
)

// KeySize is the size of a state key's secret.
const KeySize = 32

// domain separates these MACs from any other use of the same key.
const domain = "toolmesh.request_state.v1\x00"

// Errors Open returns. They tell the log why a state was refused; callers
// must not tell the client which one it was.
var (
	ErrMalformed  = errors.New("request state is malformed")
	ErrUnknownKey = errors.New("request state is signed by an unknown or retired key")
	ErrForged     = errors.New("request state does not verify (altered, or for another caller, tool or arguments)")
	ErrExpired    = errors.New("request state has expired")
)

var b64 = base64.RawURLEncoding.Strict()

// State is what a request state says.
type State struct {
	// KeyID names the key that signed it (set by Seal and Open).
	KeyID string
	// Expires is when the state stops being accepted (second precision).
	Expires time.Time
	// Round is the round of questions the state accompanies.
	Round int
	// WorkflowID and RunID address the call's workflow.
	WorkflowID string
	RunID      string
}

// Binding is what a state is bound to without carrying it: the MAC covers
// it, and the edge takes it from the request that presents the state.
type Binding struct {
	Subject         string
	Agent           string
	Tool            string
	ArgumentsDigest string
}

// Key is a state key: a secret and the id states name it by.
type Key struct {
	ID     string
	secret []byte
}

// NewKey makes a key of secret (KeySize bytes). Its id is derived from the
// secret, so the same key file always yields the same id.
func NewKey(secret []byte) (Key, error) {
	if len(secret) != KeySize {
		return Key{}, fmt.Errorf("request state key: want %d bytes, got %d", KeySize, len(secret))
	}
	sum := sha256.Sum256(append([]byte("toolmesh.request_state.key_id\x00"), secret...))
	return Key{ID: hex.EncodeToString(sum[:6]), secret: append([]byte(nil), secret...)}, nil
}

// GenerateKey returns a new random key.
func GenerateKey() (Key, error) {
	secret := make([]byte, KeySize)
	if _, err := rand.Read(secret); err != nil {
		return Key{}, fmt.Errorf("generate request state key: %w", err)
	}
	return NewKey(secret)
}

// Derive returns a secret for another use of the key, named by purpose:
// HMAC-SHA256 of the purpose under the key's secret. Each purpose gets a
// secret of its own, unrelated to the state MACs and to other purposes, so
// one key file can serve several uses that every replica must share.
func (k Key) Derive(purpose string) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(deriveDomain))
	h.Write([]byte(purpose))
	return h.Sum(nil)
}

// deriveDomain separates derived secrets from the state MACs.
const deriveDomain = "toolmesh.request_state.derive.v1\x00"

// pemType is the PEM block type of a key file.
const pemType = "TOOLMESH REQUEST STATE KEY"

// MarshalKey encodes k as a PEM key file.
func MarshalKey(k Key) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemType, Bytes: k.secret})
}

// ParseKey reads a PEM key file written by MarshalKey.
func ParseKey(b []byte) (Key, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != pemType {
		return Key{}, fmt.Errorf("request state key: want a PEM block %q", pemType)
	}
	return NewKey(block.Bytes)
}

// Sealer seals states with its current key and opens states sealed with the
// current or the previous key, so keys can rotate without refusing the
// calls in flight.
type Sealer struct {
	current Key
	keys    map[string]Key
}

// NewSealer returns a sealer signing with current and also accepting the
// previous keys.
func NewSealer(current Key, previous ...Key) (*Sealer, error) {
	if len(current.secret) != KeySize {
		return nil, errors.New("request state: no current key")
	}
	s := &Sealer{current: current, keys: map[string]Key{current.ID: current}}
	for _, k := range previous {
		if len(k.secret) != KeySize {
			return nil, errors.New("request state: a previous key is empty")
		}
		s.keys[k.ID] = k
	}
	return s, nil
}

// KeyID is the id of the key that seals new states.
func (s *Sealer) KeyID() string { return s.current.ID }

// Seal returns the state string of st bound to b, signed with the current
// key.
func (s *Sealer) Seal(st State, b Binding) (string, error) {
	st.KeyID = s.current.ID
	payload, err := encode(st)
	if err != nil {
		return "", err
	}
	return b64.EncodeToString(append(payload, mac(s.current, payload, b)...)), nil
}

// Open verifies a state string presented with b at now and returns what it
// says. A state that is malformed, signed by a key this sealer does not
// hold, altered, bound to something else or expired is refused with one of
// the package's errors.
func (s *Sealer) Open(token string, b Binding, now time.Time) (State, error) {
	raw, err := decode(token)
	if err != nil {
		return State{}, err
	}
	st, payload, sum, err := parse(raw)
	if err != nil {
		return State{}, err
	}
	k, ok := s.keys[st.KeyID]
	if !ok {
		return State{}, ErrUnknownKey
	}
	if !hmac.Equal(sum, mac(k, payload, b)) {
		return State{}, ErrForged
	}
	if !now.Before(st.Expires) {
		return State{}, ErrExpired
	}
	return st, nil
}

// Parse decodes a state string without verifying it. It is the parser Open
// runs before any MAC check, exposed for the fuzz test.
func Parse(token string) (State, error) {
	raw, err := decode(token)
	if err != nil {
		return State{}, err
	}
	st, _, _, err := parse(raw)
	return st, err
}

// decode base64url-decodes a state string. Only the 64 characters of the
// alphabet are allowed (the decoder itself skips line breaks), and strict
// decoding refuses unused trailing bits, so each payload has exactly one
// string.
func decode(token string) ([]byte, error) {
	if len(token) > MaxLen {
		return nil, ErrMalformed
	}
	for i := 0; i < len(token); i++ {
		c := token[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return nil, ErrMalformed
		}
	}
	raw, err := b64.DecodeString(token)
	if err != nil {
		return nil, ErrMalformed
	}
	return raw, nil
}

func mac(k Key, payload []byte, b Binding) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte(domain))
	h.Write(payload)
	for _, s := range []string{b.Subject, b.Agent, b.Tool, b.ArgumentsDigest} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	return h.Sum(nil)
}

// encode writes the payload of st (everything but the MAC).
func encode(st State) ([]byte, error) {
	switch {
	case !validID(st.KeyID, maxKeyIDLen, true):
		return nil, errors.New("request state: invalid key id")
	case st.Round < 1 || st.Round > MaxRound:
		return nil, fmt.Errorf("request state: round %d out of range", st.Round)
	case !validID(st.WorkflowID, MaxIDLen, false):
		return nil, errors.New("request state: invalid workflow id")
	case !validID(st.RunID, maxRunIDLen, false):
		return nil, errors.New("request state: invalid run id")
	case st.Expires.Unix() <= 0:
		return nil, errors.New("request state: no expiry")
	}
	b := make([]byte, 0, 1+1+len(st.KeyID)+8+4+2+len(st.WorkflowID)+1+len(st.RunID)+macLen)
	b = append(b, Version, byte(len(st.KeyID)))
	b = append(b, st.KeyID...)
	b = binary.BigEndian.AppendUint64(b, uint64(st.Expires.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(st.Round))
	b = binary.BigEndian.AppendUint16(b, uint16(len(st.WorkflowID)))
	b = append(b, st.WorkflowID...)
	b = append(b, byte(len(st.RunID)))
	b = append(b, st.RunID...)
	return b, nil
}

// parse splits raw into its payload and MAC and decodes the payload,
// checking every length and value; trailing bytes are an error.
func parse(raw []byte) (st State, payload, sum []byte, err error) {
	if len(raw) <= macLen {
		return State{}, nil, nil, ErrMalformed
	}
	payload, sum = raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	r := reader{b: payload}
	if v, ok := r.byte(); !ok || v != Version {
		return State{}, nil, nil, ErrMalformed
	}
	n, _ := r.byte()
	kid, ok := r.bytes(int(n))
	if !ok || !validID(string(kid), maxKeyIDLen, true) {
		return State{}, nil, nil, ErrMalformed
	}
	exp, ok := r.uint64()
	if !ok || exp == 0 || exp > 1<<40 {
		return State{}, nil, nil, ErrMalformed
	}
	round, ok := r.uint32()
	if !ok || round < 1 || round > MaxRound {
		return State{}, nil, nil, ErrMalformed
	}
	wn, ok := r.uint16()
	if !ok {
		return State{}, nil, nil, ErrMalformed
	}
	wf, ok := r.bytes(int(wn))
	if !ok || !validID(string(wf), MaxIDLen, false) {
		return State{}, nil, nil, ErrMalformed
	}
	rn, _ := r.byte()
	run, ok := r.bytes(int(rn))
	if !ok || !validID(string(run), maxRunIDLen, false) || len(r.b) != 0 {
		return State{}, nil, nil, ErrMalformed
	}
	return State{
		KeyID:      string(kid),
		Expires:    time.Unix(int64(exp), 0),
		Round:      int(round),
		WorkflowID: string(wf),
		RunID:      string(run),
	}, payload, sum, nil
}

// validID reports whether s is 1..max bytes of printable ASCII (key ids:
// letters, digits, '_' and '-' only).
func validID(s string, max int, keyID bool) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keyID {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		} else if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

// reader reads a payload front to back; every read reports whether the
// bytes were there.
type reader struct{ b []byte }

func (r *reader) bytes(n int) ([]byte, bool) {
	if n < 0 || n > len(r.b) {
		r.b = nil
		return nil, false
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out, true
}

func (r *reader) byte() (byte, bool) {
	b, ok := r.bytes(1)
	if !ok {
		return 0, false
	}
	return b[0], true
}

func (r *reader) uint16() (uint16, bool) {
	b, ok := r.bytes(2)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint16(b), true
}

func (r *reader) uint32() (uint32, bool) {
	b, ok := r.bytes(4)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint32(b), true
}

func (r *reader) uint64() (uint64, bool) {
	b, ok := r.bytes(8)
	if !ok {
		return 0, false
	}
	return binary.BigEndian.Uint64(b), true
}
