package seal_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/toolmesh/toolmesh/internal/seal"
)

func kek(id string, b byte) seal.KEK {
	return seal.KEK{ID: id, Key: bytes.Repeat([]byte{b}, seal.KeySize)}
}

func envelope(t *testing.T, keks ...seal.KEK) *seal.Envelope {
	t.Helper()
	e, err := seal.NewEnvelope("toolmesh.test.v1", keks...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEnvelopeSealOpen(t *testing.T) {
	e := envelope(t, kek("k1", 1))
	rec := e.Seal([]byte("gho_secret_token"), []byte("conn_1"))
	if bytes.Contains(rec, []byte("gho_secret_token")) {
		t.Fatal("the record holds the plaintext")
	}
	if got, err := e.Open(rec, []byte("conn_1")); err != nil || string(got) != "gho_secret_token" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	again := e.Seal([]byte("gho_secret_token"), []byte("conn_1"))
	if bytes.Equal(again, rec) || bytes.Equal(again[4:4+28], rec[4:4+28]) {
		t.Error("two seals of one plaintext share bytes of their wrapped data key: the data key or nonce is not fresh")
	}
	if id, err := seal.KEKOf(rec); err != nil || id != "k1" {
		t.Errorf("KEKOf = %q, %v, want k1", id, err)
	}
}

// TestEnvelopeRotation: a KEK added as the newest wraps new records, records
// wrapped by the old one still open, Rewrap moves them to the new one without
// touching their body, and once the old KEK is removed only rewrapped
// records open.
func TestEnvelopeRotation(t *testing.T) {
	old := envelope(t, kek("2026-11", 1))
	before := old.Seal([]byte("refresh-1"), []byte("conn_1"))

	both := envelope(t, kek("2026-11", 1), kek("2026-12", 2))
	if both.Newest() != "2026-12" {
		t.Fatalf("Newest = %s, want the last configured, 2026-12", both.Newest())
	}
	after := both.Seal([]byte("refresh-2"), []byte("conn_2"))
	if id, _ := seal.KEKOf(after); id != "2026-12" {
		t.Errorf("a new record is wrapped by %s, want the newest 2026-12", id)
	}
	if got, err := both.Open(before, []byte("conn_1")); err != nil || string(got) != "refresh-1" {
		t.Fatalf("an old record under the rotated keyring: %q, %v", got, err)
	}
	// A replica that does not know the new KEK yet refuses what it wrapped,
	// saying why.
	if _, err := old.Open(after, []byte("conn_2")); !errors.Is(err, seal.ErrUnknownKEK) || !strings.Contains(err.Error(), "2026-12") {
		t.Errorf("old keyring opening a new record: %v, want ErrUnknownKEK naming 2026-12", err)
	}

	rewrapped, changed, err := both.Rewrap(before, []byte("conn_1"))
	if err != nil || !changed {
		t.Fatalf("Rewrap = %v, %v", changed, err)
	}
	if !bytes.HasSuffix(rewrapped, before[len(before)-len("refresh-1")-28:]) {
		t.Error("Rewrap changed the sealed body; only the wrapped data key should change")
	}
	if same, changed, err := both.Rewrap(rewrapped, []byte("conn_1")); err != nil || changed || !bytes.Equal(same, rewrapped) {
		t.Errorf("a second Rewrap = changed %v, %v; want the record unchanged", changed, err)
	}
	if _, _, err := both.Rewrap(before, []byte("conn_2")); !errors.Is(err, seal.ErrUnauthentic) {
		t.Errorf("Rewrap of a record under another row's aad: %v, want ErrUnauthentic", err)
	}

	newOnly := envelope(t, kek("2026-12", 2))
	if got, err := newOnly.Open(rewrapped, []byte("conn_1")); err != nil || string(got) != "refresh-1" {
		t.Errorf("a rewrapped record after the old KEK is removed: %q, %v", got, err)
	}
	if _, err := newOnly.Open(before, []byte("conn_1")); !errors.Is(err, seal.ErrUnknownKEK) {
		t.Errorf("a record never rewrapped after the old KEK is removed: %v, want ErrUnknownKEK", err)
	}
}

// TestEnvelopeTampered: a record altered anywhere, moved to another row,
// relabelled with another configured KEK id, or opened under another key or
// purpose does not open.
func TestEnvelopeTampered(t *testing.T) {
	e := envelope(t, kek("a", 1), kek("b", 2))
	rec := e.Seal([]byte("secret"), []byte("conn_1"))
	for i := range rec {
		b := bytes.Clone(rec)
		b[i] ^= 0x01
		if _, err := e.Open(b, []byte("conn_1")); err == nil {
			t.Fatalf("a record with byte %d altered opened", i)
		}
	}
	relabelled := bytes.Clone(rec)
	relabelled[3] = 'a' // "b" -> "a": the other configured KEK
	otherKey := envelope(t, kek("b", 3))
	otherPurpose, _ := seal.NewEnvelope("toolmesh.other.v1", kek("b", 2))
	for what, open := range map[string]func() ([]byte, error){
		"another row":       func() ([]byte, error) { return e.Open(rec, []byte("conn_2")) },
		"relabelled kek id": func() ([]byte, error) { return e.Open(relabelled, []byte("conn_1")) },
		"another key":       func() ([]byte, error) { return otherKey.Open(rec, []byte("conn_1")) },
		"another purpose":   func() ([]byte, error) { return otherPurpose.Open(rec, []byte("conn_1")) },
		"truncated":         func() ([]byte, error) { return e.Open(rec[:20], []byte("conn_1")) },
		"empty":             func() ([]byte, error) { return e.Open(nil, []byte("conn_1")) },
		"a Sealer body":     func() ([]byte, error) { s, _ := seal.New(key, "x"); return e.Open(s.Seal([]byte("x"), nil), nil) },
	} {
		if _, err := open(); !errors.Is(err, seal.ErrUnauthentic) {
			t.Errorf("open %s: %v, want ErrUnauthentic", what, err)
		}
	}
}

func TestParseKeyring(t *testing.T) {
	k1 := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, seal.KeySize))
	k2 := base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{2}, seal.KeySize))
	keks, err := seal.ParseKeyring("connections keyring", "# rotated 2026-12\n2026-11 "+k1+"\n\n2026-12="+k2+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(keks) != 2 || keks[0].ID != "2026-11" || keks[1].ID != "2026-12" || keks[1].Key[0] != 2 {
		t.Fatalf("ParseKeyring = %+v", keks)
	}
	for _, bad := range []string{"", "# only a comment", k1, "bad/id " + k1, "k1 " + k1[:20], "k1 not-base64!"} {
		_, err := seal.ParseKeyring("connections keyring", bad)
		if err == nil || !strings.HasPrefix(err.Error(), "connections keyring") || (len(bad) > 8 && strings.Contains(err.Error(), k1[:20])) {
			t.Errorf("ParseKeyring(%q) = %v, want an error naming the keyring without the key", bad, err)
		}
	}
	for what, keks := range map[string][]seal.KEK{
		"none":      nil,
		"duplicate": {kek("a", 1), kek("a", 2)},
		"short key": {{ID: "a", Key: []byte("short")}},
		"bad id":    {kek("a b", 1)},
	} {
		if _, err := seal.NewEnvelope("toolmesh.test.v1", keks...); err == nil {
			t.Errorf("NewEnvelope with %s succeeded", what)
		}
	}
}
