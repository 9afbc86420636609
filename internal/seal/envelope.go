package seal

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// An Envelope seals each record under a data key of its own, and wraps that
// data key with a key-encryption key (KEK) from configuration. A record
// names the KEK that wrapped its data key, so a keyring of several KEKs
// opens records of each while only the newest wraps: rotating a KEK is
// adding a new one (records sealed before still open), rewrapping the
// records (Rewrap changes only their wrapped data key, never their sealed
// body), then removing the old one. A process that does not yet know the new
// KEK cannot open what a process that does sealed under it, so the new KEK
// reaches every replica before it becomes the newest.
//
// A record is
//
//	'E' 1 | len(kek id) | kek id | wrapped data key (nonce, key, tag) | nonce | body | tag
//
// The data key is wrapped under the KEK's purpose key (HKDF, as Sealer) with
// the header and the record's additional data bound in; the body is sealed
// under the data key with the additional data bound in. A record moved to
// another row, with another KEK id written in, or with any byte altered
// does not open.
type Envelope struct {
	purpose string
	keks    map[string]*Sealer
	newest  string
}

// KEK is one configured key-encryption key.
type KEK struct {
	// ID names the key in records (1 to 64 letters, digits, '.', '_', '-'),
	// e.g. "2026-12". It is not secret and is never derived from the key.
	ID string
	// Key is KeySize random bytes.
	Key []byte
}

const (
	envelopeMagic   = 'E'
	envelopeVersion = 1
	dataKeySize     = 32
)

var kekIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// NewEnvelope returns the envelope sealer of purpose over keks; the last of
// keks is the newest, which wraps new records. Every KEK opens the records
// it wrapped.
func NewEnvelope(purpose string, keks ...KEK) (*Envelope, error) {
	if len(keks) == 0 {
		return nil, fmt.Errorf("%s: no key-encryption key configured", purpose)
	}
	e := &Envelope{purpose: purpose, keks: make(map[string]*Sealer, len(keks))}
	for _, k := range keks {
		if !kekIDPattern.MatchString(k.ID) {
			return nil, fmt.Errorf("%s: key id %q is not 1 to 64 letters, digits, '.', '_' or '-'", purpose, k.ID)
		}
		if _, dup := e.keks[k.ID]; dup {
			return nil, fmt.Errorf("%s: key id %q is configured twice", purpose, k.ID)
		}
		s, err := New(k.Key, purpose+" kek")
		if err != nil {
			return nil, fmt.Errorf("%s: key %s: %w", purpose, k.ID, err)
		}
		e.keks[k.ID] = s
		e.newest = k.ID
	}
	return e, nil
}

// ParseKeyring reads KEKs from text: one per line, "<id> <base64 key>" (or
// "<id>=<base64 key>"), oldest first, so the last line is the newest; blank
// lines and lines starting with '#' are skipped. what names the keyring in
// errors, which never repeat a key.
func ParseKeyring(what, text string) ([]KEK, error) {
	var keks []KEK
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, value, ok := strings.Cut(line, "=")
		if i := strings.IndexAny(line, " \t"); i >= 0 && (!ok || i < len(id)) {
			id, value, ok = line[:i], line[i+1:], true
		}
		id = strings.TrimSpace(id)
		if !ok || !kekIDPattern.MatchString(id) {
			return nil, fmt.Errorf("%s line %d: want \"<id> <base64 key>\" with an id of 1 to 64 letters, digits, '.', '_' or '-'", what, n+1)
		}
		key, err := ParseKey(fmt.Sprintf("%s line %d key", what, n+1), value)
		if err != nil {
			return nil, err
		}
		keks = append(keks, KEK{ID: id, Key: key})
	}
	if len(keks) == 0 {
		return nil, fmt.Errorf("%s holds no key; want lines of \"<id> <base64 key>\" (a key from `openssl rand -base64 %d`)", what, KeySize)
	}
	return keks, nil
}

// Newest returns the id of the KEK that wraps new records.
func (e *Envelope) Newest() string { return e.newest }

// Seal encrypts plaintext under a fresh data key wrapped by the newest KEK,
// binding it to aad.
func (e *Envelope) Seal(plaintext, aad []byte) []byte {
	dk := make([]byte, dataKeySize)
	if _, err := rand.Read(dk); err != nil {
		panic("seal: crypto/rand failed: " + err.Error())
	}
	data, err := New(dk, e.purpose+" data")
	if err != nil {
		panic("seal: " + err.Error()) // dk has KeySize bytes
	}
	return append(e.wrap(e.newest, dk, aad), data.Seal(plaintext, bodyAAD(aad))...)
}

func bodyAAD(aad []byte) []byte { return append([]byte("body\x00"), aad...) }

// wrap returns the header of a record whose data key dk is wrapped by kek:
// its prefix and the wrapped key.
func (e *Envelope) wrap(kek string, dk, aad []byte) []byte {
	head := append([]byte{envelopeMagic, envelopeVersion, byte(len(kek))}, kek...)
	return append(head, e.keks[kek].Seal(dk, wrapAAD(head, aad))...)
}

func wrapAAD(head, aad []byte) []byte {
	return append(append(bytes.Clone(head), 0), aad...)
}

// wrappedSize is the length of a wrapped data key: nonce, key, tag.
const wrappedSize = 12 + dataKeySize + 16

// ErrUnknownKEK means a record was wrapped by a KEK the keyring does not
// hold (removed too early, or not yet configured on this replica).
var ErrUnknownKEK = errors.New("the record's key-encryption key is not configured")

// record is a parsed envelope record.
type record struct {
	kek     string
	prefix  []byte // magic, version, id length, id
	wrapped []byte
	body    []byte
}

func parse(b []byte) (record, error) {
	if len(b) < 3 || b[0] != envelopeMagic || b[1] != envelopeVersion {
		return record{}, ErrUnauthentic
	}
	n := int(b[2])
	if len(b) < 3+n+wrappedSize {
		return record{}, ErrUnauthentic
	}
	return record{kek: string(b[3 : 3+n]), prefix: b[:3+n], wrapped: b[3+n : 3+n+wrappedSize], body: b[3+n+wrappedSize:]}, nil
}

// KEKOf returns the id of the KEK that wrapped record's data key.
func KEKOf(b []byte) (string, error) {
	r, err := parse(b)
	return r.kek, err
}

// dataKey unwraps the data key of r.
func (e *Envelope) dataKey(r record, aad []byte) ([]byte, error) {
	kek, ok := e.keks[r.kek]
	if !ok {
		return nil, fmt.Errorf("%w: key id %q (configured: %s)", ErrUnknownKEK, r.kek, e.ids())
	}
	return kek.Open(r.wrapped, wrapAAD(r.prefix, aad))
}

func (e *Envelope) ids() string {
	ids := make([]string, 0, len(e.keks))
	for id := range e.keks {
		ids = append(ids, id)
	}
	return strings.Join(ids, ", ")
}

// Open decrypts a record Seal made with the same aad, under whichever
// configured KEK wrapped it. It fails with ErrUnauthentic when the record was
// altered or belongs elsewhere, and with ErrUnknownKEK when its KEK is not
// configured.
func (e *Envelope) Open(b, aad []byte) ([]byte, error) {
	r, err := parse(b)
	if err != nil {
		return nil, err
	}
	dk, err := e.dataKey(r, aad)
	if err != nil {
		return nil, err
	}
	data, err := New(dk, e.purpose+" data")
	if err != nil {
		return nil, ErrUnauthentic
	}
	return data.Open(r.body, bodyAAD(aad))
}

// Rewrap returns record with its data key wrapped by the newest KEK, and
// whether it changed (false: it already was). The sealed body is kept as it
// is; a record that does not open is not rewrapped.
func (e *Envelope) Rewrap(b, aad []byte) ([]byte, bool, error) {
	if _, err := e.Open(b, aad); err != nil {
		return nil, false, err
	}
	r, _ := parse(b)
	if r.kek == e.newest {
		return b, false, nil
	}
	dk, err := e.dataKey(r, aad)
	if err != nil {
		return nil, false, err
	}
	return append(e.wrap(e.newest, dk, aad), r.body...), true, nil
}
