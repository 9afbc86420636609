package auditcheckpoint

import (
	"bufio"
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// KeysPath is where a mesh publishes its audit checkpoint keys, below the
// same base URL as its mesh keys (the A2A endpoint, whose
// /.well-known/jwks.json holds the mesh key). The two never mix: the JWKS
// holds the key that signs tokens, cards and attestations; this document
// holds only keys that sign audit checkpoints, one verifier key a line
// (VerifierKey), and nothing else.
const KeysPath = "/.well-known/toolmesh-audit-keys"

// KeysContentType is the media type of the document at KeysPath.
const KeysContentType = "text/plain; charset=utf-8"

// maxKeys bounds the keys read from one published document.
const maxKeys = 16

// VerifierKey is pub as a signed-note verifier key (C2SP signed-note):
//
//	toolmesh-audit/<key id>+<key hash, 8 hex digits>+<base64 of 0x01 and the public key>
//
// the format Go's checksum database publishes its key in, so any
// signed-note implementation (golang.org/x/mod/sumdb/note) reads it. The
// name before the first "+" is the origin of the checkpoints it verifies;
// a mesh key never has this form.
func VerifierKey(pub ed25519.PublicKey) string {
	name := Origin(pub)
	return fmt.Sprintf("%s+%08x+%s", name, keyHash(name, pub), base64.StdEncoding.EncodeToString(append([]byte{algEd25519}, pub...)))
}

// ParseVerifierKey reads one verifier key (VerifierKey). It refuses a key
// whose name is not the audit checkpoint origin of the key it carries, or
// whose hash does not match, so a key cannot be published under another
// key's name.
func ParseVerifierKey(s string) (ed25519.PublicKey, error) {
	name, rest, ok1 := strings.Cut(s, "+")
	hash, b64, ok2 := strings.Cut(rest, "+")
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%q is not a verifier key (name+hash+key)", shorten(s, 80))
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != algEd25519 {
		return nil, fmt.Errorf("verifier key %s does not carry an Ed25519 key", shorten(name, 80))
	}
	pub := ed25519.PublicKey(raw[1:])
	if name != Origin(pub) {
		return nil, fmt.Errorf("verifier key %s is not named for its key (want %s): not an audit checkpoint key", shorten(name, 80), Origin(pub))
	}
	h, err := strconv.ParseUint(hash, 16, 32)
	if err != nil || len(hash) != 8 || uint32(h) != keyHash(name, pub) {
		return nil, fmt.Errorf("verifier key %s has a key hash that does not match its key", name)
	}
	return pub, nil
}

// FormatKeys is the document published at KeysPath: the verifier key of
// each of keys, a line each (several while checkpoints signed before a key
// rotation are kept).
func FormatKeys(keys ...ed25519.PublicKey) string {
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(VerifierKey(k))
		b.WriteByte('\n')
	}
	return b.String()
}

// ParseKeys reads the document at KeysPath: verifier keys, one a line;
// blank lines and lines starting with "#" are skipped. It fails on the
// first line that is not an audit checkpoint verifier key.
func ParseKeys(doc string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	sc := bufio.NewScanner(strings.NewReader(doc))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(keys) == maxKeys {
			return nil, fmt.Errorf("more than %d keys", maxKeys)
		}
		k, err := ParseVerifierKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no verifier key")
	}
	return keys, nil
}
