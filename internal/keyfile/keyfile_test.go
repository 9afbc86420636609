package keyfile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/keyfile"
)

func TestEnsureCreatesOnceAndNeverOverwrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "keys")
	key, pub := filepath.Join(dir, "x.key"), filepath.Join(dir, "x.pub")
	created, err := keyfile.Ensure(key, pub)
	if err != nil || !created {
		t.Fatalf("Ensure = %v, %v; want a new pair", created, err)
	}
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("private key file: %v, %v; want mode 0600", fi, err)
	}
	priv, err := keyfile.ReadPrivate(key)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := keyfile.ReadPublic(pub)
	if err != nil || len(pubs) != 1 || !pubs[0].Equal(priv.Public()) {
		t.Fatalf("public key file = %v, %v; want the private key's public half", pubs, err)
	}
	before, _ := os.ReadFile(key)
	if created, err := keyfile.Ensure(key, pub); err != nil || created {
		t.Errorf("second Ensure = %v, %v; want the pair kept", created, err)
	}
	// A lost public key is derived again from the private key.
	if err := os.Remove(pub); err != nil {
		t.Fatal(err)
	}
	if created, err := keyfile.Ensure(key, pub); err != nil || created {
		t.Errorf("Ensure without the public key = %v, %v; want it derived", created, err)
	}
	after, _ := os.ReadFile(key)
	pubs, err = keyfile.ReadPublic(pub)
	if !bytes.Equal(before, after) || err != nil || !pubs[0].Equal(priv.Public()) {
		t.Errorf("the private key changed or the derived public key is not its own")
	}
}

func TestParseRefusesWhatIsNotAnEd25519Key(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", "no PRIVATE KEY PEM block"},
		{"a public key", "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n", "no PRIVATE KEY PEM block"},
		{"garbage in the block", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "not a PKCS #8 private key"},
	} {
		if _, err := keyfile.ParsePrivate([]byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ParsePrivate = %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := keyfile.ParsePublic([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")); err == nil || !strings.Contains(err.Error(), `unexpected PEM block "PRIVATE KEY"`) {
		t.Errorf("ParsePublic of a private key block = %v, want it refused", err)
	}
}
