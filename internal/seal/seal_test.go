package seal_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/seal"
)

var key = bytes.Repeat([]byte{7}, seal.KeySize)

func TestSealOpen(t *testing.T) {
	s, err := seal.New(key, "toolmesh.test.v1")
	if err != nil {
		t.Fatal(err)
	}
	body := s.Seal([]byte("whsec_secret"), []byte("sub_1"))
	if bytes.Contains(body, []byte("whsec_secret")) {
		t.Fatal("the sealed body holds the plaintext")
	}
	if got, err := s.Open(body, []byte("sub_1")); err != nil || string(got) != "whsec_secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if again := s.Seal([]byte("whsec_secret"), []byte("sub_1")); bytes.Equal(again, body) {
		t.Error("two seals of one plaintext are equal: the nonce is not fresh")
	}
	other, _ := seal.New(key, "toolmesh.other.v1")
	otherKey, _ := seal.New(bytes.Repeat([]byte{8}, seal.KeySize), "toolmesh.test.v1")
	for what, open := range map[string]func() ([]byte, error){
		"another row":     func() ([]byte, error) { return s.Open(body, []byte("sub_2")) },
		"another purpose": func() ([]byte, error) { return other.Open(body, []byte("sub_1")) },
		"another key":     func() ([]byte, error) { return otherKey.Open(body, []byte("sub_1")) },
		"altered":         func() ([]byte, error) { b := bytes.Clone(body); b[len(b)-1] ^= 1; return s.Open(b, []byte("sub_1")) },
		"truncated":       func() ([]byte, error) { return s.Open(body[:10], []byte("sub_1")) },
	} {
		if _, err := open(); !errors.Is(err, seal.ErrUnauthentic) {
			t.Errorf("open in %s: %v, want ErrUnauthentic", what, err)
		}
	}
	if s.KeyID() == other.KeyID() || s.KeyID() == otherKey.KeyID() || len(s.KeyID()) != 16 {
		t.Errorf("key ids %s, %s, %s: want 16 hex characters, one per purpose and key", s.KeyID(), other.KeyID(), otherKey.KeyID())
	}
}

func TestParseKey(t *testing.T) {
	secret := "BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc="
	if got, err := seal.ParseKey("test key", secret); err != nil || !bytes.Equal(got, key) {
		t.Fatalf("ParseKey = %x, %v", got, err)
	}
	for _, bad := range []string{"not base64!", "AAAA", secret + secret} {
		_, err := seal.ParseKey("test key", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "test key ") || strings.Contains(err.Error(), bad) {
			t.Errorf("ParseKey(%q) = %v, want an error naming the key without its value", bad, err)
		}
	}
	if _, err := seal.New(key[:16], "toolmesh.test.v1"); err == nil {
		t.Error("New with a short key succeeded")
	}
}
