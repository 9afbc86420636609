package auditcheckpoint_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/toolmesh/toolmesh/internal/auditcheckpoint"
	"golang.org/x/mod/sumdb/note"
)

// seedKey is a fixed key: bytes 0..31 as the Ed25519 seed.
func seedKey() ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	return ed25519.NewKeyFromSeed(seed)
}

func otherKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

var (
	at   = time.Date(2026, 3, 1, 12, 34, 56, 789_000_000, time.UTC)
	hash = "6d8ddbd48a44263a1b811d7e5d3cfb3ba3514894fcb392bad939fc4b14386536"
)

// The note below was written from the format in the package comment and
// checked with Python's hashlib and the cryptography package's Ed25519. It
// pins the format: every published checkpoint log must keep verifying.
func TestNoteIsPinned(t *testing.T) {
	const want = "toolmesh-audit/Vkdap1RjR0wChd9d\n" +
		"42\n" +
		"6d8ddbd48a44263a1b811d7e5d3cfb3ba3514894fcb392bad939fc4b14386536\n" +
		"time 2026-03-01T12:34:56.789Z\n" +
		"\n" +
		"— toolmesh-audit/Vkdap1RjR0wChd9d M5Fqs/6FkQf4H18i05P6+fdS+rdIt5aNdFVjgQ+ViVexWv7jsdEVPTFhdyDvcK3nszBFil1h1AT+D03cphwYpDcHzQ8=\n"
	s := auditcheckpoint.NewSigner(seedKey())
	got, err := s.Sign(42, hash, at.In(time.FixedZone("CET", 3600)).Add(400*time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if got.Note != want {
		t.Errorf("note changed:\n got %q\nwant %q", got.Note, want)
	}
	wantCP := auditcheckpoint.Checkpoint{Origin: "toolmesh-audit/Vkdap1RjR0wChd9d", Seq: 42, Hash: hash, Time: at}
	if diff := cmp.Diff(wantCP, got.Checkpoint); diff != "" {
		t.Errorf("signed checkpoint (-want +got):\n%s", diff)
	}
	c, err := s.Verifier().Open(want)
	if err != nil {
		t.Fatalf("Open of the pinned note: %v", err)
	}
	if diff := cmp.Diff(wantCP, c); diff != "" {
		t.Errorf("opened checkpoint (-want +got):\n%s", diff)
	}
}

func TestSignRefusesWhatIsNotARecord(t *testing.T) {
	s := auditcheckpoint.NewSigner(seedKey())
	for _, tc := range []struct {
		seq  int64
		hash string
	}{{-1, hash}, {1, "ABC"}, {1, strings.ToUpper(hash)}, {1, hash + "0"}} {
		if _, err := s.Sign(tc.seq, tc.hash, at); err == nil {
			t.Errorf("Sign(%d, %q) succeeded, want an error", tc.seq, tc.hash)
		}
	}
}

func problem(t *testing.T, err error) auditcheckpoint.Problem {
	t.Helper()
	var ce *auditcheckpoint.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *auditcheckpoint.Error", err)
	}
	if ce.Detail == "" {
		t.Error("the error does not say what is wrong")
	}
	return ce.Problem
}

func TestOpenRejectsTamperedAndForeignNotes(t *testing.T) {
	s := auditcheckpoint.NewSigner(seedKey())
	signed, err := s.Sign(42, hash, at)
	if err != nil {
		t.Fatal(err)
	}
	note := signed.Note
	other := auditcheckpoint.NewSigner(otherKey(t))
	foreign, err := other.Sign(42, hash, at)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(note, "\n")
	sigLine := lines[5]
	cases := []struct {
		name string
		note string
		want auditcheckpoint.Problem
	}{
		{"seq raised", strings.Replace(note, "\n42\n", "\n43\n", 1), auditcheckpoint.BadSignature},
		{"seq lowered", strings.Replace(note, "\n42\n", "\n41\n", 1), auditcheckpoint.BadSignature},
		{"hash changed", strings.Replace(note, hash, strings.Repeat("0", 64), 1), auditcheckpoint.BadSignature},
		{"time changed", strings.Replace(note, "56.789Z", "56.788Z", 1), auditcheckpoint.BadSignature},
		{"signature bytes changed", strings.Replace(note, "M5Fqs/6F", "M5Fqs/6G", 1), auditcheckpoint.BadSignature},
		{"another key's signature under this key's hash", strings.Replace(note, sigLine, sigPrefixOf(sigLine)+swapSignature(t, sigLine, strings.Split(foreign.Note, "\n")[5]), 1), auditcheckpoint.BadSignature},
		{"signed by another key", foreign.Note, auditcheckpoint.UnknownKey},
		{"no signature", strings.Join(lines[:4], "\n") + "\n\n", auditcheckpoint.Malformed},
		{"no blank line", strings.Join(lines[:4], "\n") + "\n" + sigLine + "\n", auditcheckpoint.Malformed},
		{"missing final newline", strings.TrimSuffix(note, "\n"), auditcheckpoint.Malformed},
		{"three text lines", strings.Join(append(lines[:3:3], lines[4:]...), "\n"), auditcheckpoint.Malformed},
		{"seq with a sign", strings.Replace(note, "\n42\n", "\n+42\n", 1), auditcheckpoint.Malformed},
		{"seq with a leading zero", strings.Replace(note, "\n42\n", "\n042\n", 1), auditcheckpoint.Malformed},
		{"negative seq", strings.Replace(note, "\n42\n", "\n-42\n", 1), auditcheckpoint.Malformed},
		{"upper-case hash", strings.Replace(note, hash, strings.ToUpper(hash), 1), auditcheckpoint.Malformed},
		{"bad time line", strings.Replace(note, "time 2026", "at 2026", 1), auditcheckpoint.Malformed},
		{"foreign origin", strings.Replace(note, "toolmesh-audit/Vkdap1RjR0wChd9d\n42", "example.com/log\n42", 1), auditcheckpoint.Malformed},
		{"short signature", strings.Replace(note, sigLine, sigLine[:len(sigLine)-8], 1), auditcheckpoint.Malformed},
		{"signature not base64", strings.Replace(note, "M5Fqs/6F", "M5Fqs*6F", 1), auditcheckpoint.Malformed},
		{"garbage", "hello\n", auditcheckpoint.Malformed},
		{"not UTF-8", strings.Replace(note, "42", "4\xff", 1), auditcheckpoint.Malformed},
		{"longer than a note may be", note + strings.Repeat("— x AAAA\n", 500), auditcheckpoint.Malformed},
	}
	v := s.Verifier()
	for _, tc := range cases {
		if _, err := v.Open(tc.note); err == nil {
			t.Errorf("%s: Open succeeded, want %v", tc.name, tc.want)
		} else if got := problem(t, err); got != tc.want {
			t.Errorf("%s: problem %v (%v), want %v", tc.name, got, err, tc.want)
		}
	}
	// A verifier holding both keys takes either's checkpoints.
	both := auditcheckpoint.NewVerifier(seedKey().Public().(ed25519.PublicKey), other.PublicKey())
	for _, n := range []string{note, foreign.Note} {
		if _, err := both.Open(n); err != nil {
			t.Errorf("a verifier holding both keys: %v", err)
		}
	}
	// A second signature by an unknown key does not spoil a good one.
	cosigned := note + strings.Split(foreign.Note, "\n")[5] + "\n"
	if _, err := v.Open(cosigned); err != nil {
		t.Errorf("a note with an extra unknown signature: %v, want it accepted", err)
	}
}

// sigPrefixOf is a signature line up to its base64 part.
func sigPrefixOf(line string) string { return line[:strings.LastIndex(line, " ")+1] }

// swapSignature keeps the key hash of line's signature and puts the
// Ed25519 signature of other in its place.
func swapSignature(t *testing.T, line, other string) string {
	t.Helper()
	decode := func(l string) []byte {
		b, err := base64.StdEncoding.DecodeString(l[strings.LastIndex(l, " ")+1:])
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return base64.StdEncoding.EncodeToString(append(decode(line)[:4], decode(other)[4:]...))
}

func TestReadTakesEveryNoteOfALog(t *testing.T) {
	s := auditcheckpoint.NewSigner(seedKey())
	var log strings.Builder
	var want []int64
	var first string
	for seq := range int64(4) {
		c, err := s.Sign(seq, strings.Repeat(string("0123"[seq]), 64), at.Add(time.Duration(seq)*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if seq == 0 {
			first = c.Note
		}
		log.WriteString(c.Note + "\n")
		want = append(want, seq)
	}
	forged := strings.Replace(first, "\n0\n", "\n9\n", 1) + "\n"
	text := log.String() + forged + "not a checkpoint\n\n" + strings.Repeat("x", 10000) + "\n\n"
	c4, _ := s.Sign(4, hash, at)
	text += strings.TrimSuffix(c4.Note, "\n") // the last note without its newlines
	want = append(want, 4)

	valid, rejected, err := s.Verifier().Read(strings.NewReader(text), "audit-checkpoints.log")
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, c := range valid {
		got = append(got, c.Seq)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("valid checkpoints (-want +got):\n%s", diff)
	}
	if valid[1].Source != "audit-checkpoints.log:8" || valid[1].Note != func() string { c, _ := s.Sign(1, strings.Repeat("1", 64), at.Add(time.Minute)); return c.Note }() {
		t.Errorf("second checkpoint = %q at %s, want the note as signed at audit-checkpoints.log:8", valid[1].Note, valid[1].Source)
	}
	type rej struct {
		Source  string
		Problem auditcheckpoint.Problem
	}
	var gotRej []rej
	for _, r := range rejected {
		gotRej = append(gotRej, rej{r.Source, r.Problem})
		if r.Detail == "" || r.Note == "" || len(r.Note) > 1100 {
			t.Errorf("rejected %s: detail %q, note of %d bytes; want both, the note cut to about 1 KiB", r.Source, r.Detail, len(r.Note))
		}
	}
	wantRej := []rej{
		{"audit-checkpoints.log:29", auditcheckpoint.BadSignature},
		{"audit-checkpoints.log:36", auditcheckpoint.Malformed},
		{"audit-checkpoints.log:38", auditcheckpoint.Malformed},
	}
	if diff := cmp.Diff(wantRej, gotRej); diff != "" {
		t.Errorf("rejected (-want +got):\n%s", diff)
	}
}

func TestAppendWritesALogThatReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-checkpoints.log")
	s := auditcheckpoint.NewSigner(seedKey())
	for seq := range int64(3) {
		c, err := s.Sign(seq, hash, at)
		if err != nil {
			t.Fatal(err)
		}
		if err := auditcheckpoint.Append(path, c.Note); err != nil {
			t.Fatalf("Append: %v", err)
		}
	}
	valid, rejected, err := s.Verifier().ReadFile(path, "log")
	if err != nil || len(valid) != 3 || len(rejected) != 0 {
		t.Fatalf("ReadFile = %d valid, %d rejected, %v; want 3 valid", len(valid), len(rejected), err)
	}
	if _, _, err := s.Verifier().ReadFile(filepath.Join(t.TempDir(), "missing"), "log"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile of a missing file: %v, want not exist", err)
	}
}

// TestVerifierKeyIsASignedNoteKey: the published key is a C2SP signed-note
// verifier key: golang.org/x/mod/sumdb/note reads it and opens a
// checkpoint with it, and ParseKeys reads it back to the same key.
func TestVerifierKeyIsASignedNoteKey(t *testing.T) {
	key := seedKey()
	pub := key.Public().(ed25519.PublicKey)
	s, err := auditcheckpoint.NewSigner(key).Sign(7, strings.Repeat("ab", 32), time.Unix(1_700_000_000, 0))
	if err != nil {
		t.Fatal(err)
	}
	vk := auditcheckpoint.VerifierKey(pub)
	v, err := note.NewVerifier(vk)
	if err != nil {
		t.Fatalf("note.NewVerifier(%q): %v", vk, err)
	}
	n, err := note.Open([]byte(s.Note), note.VerifierList(v))
	if err != nil || len(n.Sigs) != 1 || n.Sigs[0].Name != auditcheckpoint.Origin(pub) {
		t.Fatalf("note.Open = %+v, %v; want one signature by %s", n, err, auditcheckpoint.Origin(pub))
	}
	keys, err := auditcheckpoint.ParseKeys("# the audit checkpoint keys\n\n" + auditcheckpoint.FormatKeys(pub, otherKey(t).Public().(ed25519.PublicKey)))
	if err != nil || len(keys) != 2 || !keys[0].Equal(pub) {
		t.Fatalf("ParseKeys = %v, %v; want the two keys, %x first", keys, err, pub)
	}
}

// TestParseKeysRefusesOtherKeys: a key under another key's name, a changed
// key hash, or a document that is not a list of verifier keys (a JWKS) is
// refused with its reason.
func TestParseKeysRefusesOtherKeys(t *testing.T) {
	pub := seedKey().Public().(ed25519.PublicKey)
	other := otherKey(t).Public().(ed25519.PublicKey)
	vk := auditcheckpoint.VerifierKey(pub)
	name, rest, _ := strings.Cut(vk, "+")
	hash, b64, _ := strings.Cut(rest, "+")
	for _, tc := range []struct{ doc, want string }{
		{strings.Replace(vk, name, auditcheckpoint.Origin(other), 1), "not named for its key"},
		{name + "+00000000+" + b64, "key hash that does not match"},
		{name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(pub), "does not carry an Ed25519 key"},
		{`{"keys":[{"kty":"OKP","crv":"Ed25519","x":"AAAA"}]}`, "not a verifier key"},
		{"", "no verifier key"},
	} {
		if _, err := auditcheckpoint.ParseKeys(tc.doc); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseKeys(%q) = %v, want an error saying %q", tc.doc, err, tc.want)
		}
	}
}
