// Package auditcheckpoint signs and reads checkpoints of the audit chain: signed
// statements "at this time the chain had seq records and the last one had
// this hash". A checkpoint kept outside the audit database proves what the
// trail held, so a tail cut from the database together with its head row,
// or a trail rewritten with every hash recomputed, no longer checks out.
//
// A checkpoint is a signed note, in the spirit of Go's checksum database
// and Certificate Transparency (C2SP signed-note and tlog-checkpoint):
//
//	toolmesh-audit/<key id>
//	42
//	9c1f…<64 hex characters: the hash of record 42>
//	time 2026-03-01T12:00:00.000Z
//
//	— toolmesh-audit/<key id> <base64 of key hash (4 bytes) and Ed25519 signature (64 bytes)>
//
// The text lines (everything before the blank line, with their newlines)
// are what is signed. The origin line names the signer; the key hash is the
// first four bytes of SHA-256(name, "\n", 0x01, public key), so a verifier
// holding several keys picks the right one. The checkpoint log is such
// notes one after another, each followed by a blank line.
package auditcheckpoint

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Checkpoint says that at Time the chain had Seq records, the last with
// hash Hash (seq 0 and 64 zeros: the empty chain).
type Checkpoint struct {
	Origin string
	Seq    int64
	Hash   string
	Time   time.Time
}

// Signed is a checkpoint whose signature verified, with the note it was
// read from and where.
type Signed struct {
	Checkpoint
	// Note is the checkpoint exactly as signed.
	Note string
	// Source says where it was read: "<file>:<line>", "request:<line>", ...
	Source string
}

// Problem is why a note cannot be trusted.
type Problem int

const (
	// Malformed: the text is not a checkpoint note.
	Malformed Problem = iota + 1
	// UnknownKey: no signature is by a key the verifier holds.
	UnknownKey
	// BadSignature: a signature names a key the verifier holds but does not
	// verify.
	BadSignature
)

// Rejected is a note that was read but cannot be trusted.
type Rejected struct {
	Source  string
	Problem Problem
	Detail  string
	// Note is the text as read, at most maxShown bytes.
	Note string
}

// Name prefixes every origin: "toolmesh-audit/" and the key id.
const Name = "toolmesh-audit"

// timeLayout writes the time line: UTC, three fractional digits.
const timeLayout = "2006-01-02T15:04:05.000Z"

// sigPrefix starts a signature line: an em dash and a space.
const sigPrefix = "\u2014 "

// algEd25519 is the signature type byte in the key hash.
const algEd25519 = 0x01

// maxNote bounds one note; maxShown bounds the text kept of a rejected one.
const (
	maxNote  = 4096
	maxShown = 1024
)

var hashPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// KeyID is the id in a key's origin: the first 16 characters of the
// base64url SHA-256 of the public key.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return base64.RawURLEncoding.EncodeToString(sum[:])[:16]
}

// Origin is the origin line, and signature name, of checkpoints signed with
// the private key of pub.
func Origin(pub ed25519.PublicKey) string { return Name + "/" + KeyID(pub) }

func keyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', algEd25519})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// Signer signs checkpoints with the audit service's key.
type Signer struct {
	origin string
	key    ed25519.PrivateKey
	hash   uint32
}

// NewSigner returns a signer for key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	pub := key.Public().(ed25519.PublicKey)
	origin := Origin(pub)
	return &Signer{origin: origin, key: key, hash: keyHash(origin, pub)}
}

// Origin is the origin line of this signer's checkpoints.
func (s *Signer) Origin() string { return s.origin }

// PublicKey is the key that verifies this signer's checkpoints.
func (s *Signer) PublicKey() ed25519.PublicKey { return s.key.Public().(ed25519.PublicKey) }

// Verifier returns the verifier of this signer's checkpoints.
func (s *Signer) Verifier() *Verifier { return NewVerifier(s.key.Public().(ed25519.PublicKey)) }

// Sign signs a checkpoint of seq and hash at t and returns it with its note.
func (s *Signer) Sign(seq int64, hash string, t time.Time) (Signed, error) {
	if seq < 0 || !hashPattern.MatchString(hash) {
		return Signed{}, fmt.Errorf("sign checkpoint: seq %d and hash %q do not name a record", seq, hash)
	}
	c := Checkpoint{Origin: s.origin, Seq: seq, Hash: hash, Time: t.UTC().Truncate(time.Millisecond)}
	text := body(c)
	sig := make([]byte, 4, 4+ed25519.SignatureSize)
	binary.BigEndian.PutUint32(sig, s.hash)
	sig = append(sig, ed25519.Sign(s.key, []byte(text))...)
	note := text + "\n" + sigPrefix + s.origin + " " + base64.StdEncoding.EncodeToString(sig) + "\n"
	return Signed{Checkpoint: c, Note: note}, nil
}

// body is the signed text of c.
func body(c Checkpoint) string {
	return c.Origin + "\n" + strconv.FormatInt(c.Seq, 10) + "\n" + c.Hash + "\n" + "time " + c.Time.UTC().Format(timeLayout) + "\n"
}

// Verifier checks checkpoint signatures against one or more public keys
// (several while checkpoints signed before a key rotation are kept).
type Verifier struct {
	keys map[uint32][]verifierKey
}

type verifierKey struct {
	name string
	pub  ed25519.PublicKey
}

// NewVerifier returns a verifier trusting keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: map[uint32][]verifierKey{}}
	for _, pub := range keys {
		name := Origin(pub)
		h := keyHash(name, pub)
		v.keys[h] = append(v.keys[h], verifierKey{name: name, pub: pub})
	}
	return v
}

// Error is why a note was rejected.
type Error struct {
	Problem Problem
	Detail  string
}

func (e *Error) Error() string { return e.Detail }

func reject(p Problem, format string, args ...any) *Error {
	return &Error{Problem: p, Detail: fmt.Sprintf(format, args...)}
}

// Open parses one note and checks its signatures: it returns the checkpoint
// when a signature by a key v holds verifies and the origin is that key's,
// else an *Error saying why not.
func (v *Verifier) Open(note string) (Checkpoint, error) {
	c, err := v.open(note)
	if err != nil {
		return Checkpoint{}, err
	}
	return c, nil
}

func (v *Verifier) open(note string) (Checkpoint, *Error) {
	if len(note) > maxNote {
		return Checkpoint{}, reject(Malformed, "the note is longer than %d bytes", maxNote)
	}
	if !utf8.ValidString(note) {
		return Checkpoint{}, reject(Malformed, "the note is not UTF-8")
	}
	text, sigs, ok := strings.Cut(note, "\n\n")
	if !ok {
		return Checkpoint{}, reject(Malformed, "the note has no blank line before its signatures")
	}
	text += "\n"
	c, perr := parseBody(text)
	if perr != nil {
		return Checkpoint{}, perr
	}
	if sigs == "" || !strings.HasSuffix(sigs, "\n") {
		return Checkpoint{}, reject(Malformed, "the note does not end with a signature line")
	}
	sigLines := strings.Split(strings.TrimSuffix(sigs, "\n"), "\n")
	var bad *Error // a signature by a key v holds that does not verify
	for _, line := range sigLines {
		rest, ok := strings.CutPrefix(line, sigPrefix)
		if !ok {
			return Checkpoint{}, reject(Malformed, "%q is not a signature line", shorten(line, 80))
		}
		name, b64, ok := strings.Cut(rest, " ")
		if !ok || name == "" || strings.ContainsAny(name, " +") {
			return Checkpoint{}, reject(Malformed, "%q is not a signature line", shorten(line, 80))
		}
		raw, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(raw) != 4+ed25519.SignatureSize {
			return Checkpoint{}, reject(Malformed, "the signature of %s is not 4 + 64 bytes in base64", name)
		}
		for _, k := range v.keys[binary.BigEndian.Uint32(raw)] {
			if k.name != name {
				continue
			}
			if !ed25519.Verify(k.pub, []byte(text), raw[4:]) {
				bad = reject(BadSignature, "the signature by %s does not verify: the checkpoint was changed or forged", name)
				continue
			}
			if c.Origin != name {
				bad = reject(BadSignature, "the checkpoint names origin %s but is signed by %s", c.Origin, name)
				continue
			}
			return c, nil
		}
	}
	if bad != nil {
		return Checkpoint{}, bad
	}
	return Checkpoint{}, reject(UnknownKey, "no signature is by a key the verifier was given (origin %s)", shorten(c.Origin, 80))
}

// parseBody reads the text lines of a checkpoint.
func parseBody(text string) (Checkpoint, *Error) {
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 4 {
		return Checkpoint{}, reject(Malformed, "a checkpoint has 4 text lines (origin, seq, hash, time), this one %d", len(lines))
	}
	var c Checkpoint
	c.Origin = lines[0]
	if !strings.HasPrefix(c.Origin, Name+"/") {
		return Checkpoint{}, reject(Malformed, "origin %q is not an audit checkpoint signer", shorten(c.Origin, 80))
	}
	seq, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != lines[1] {
		return Checkpoint{}, reject(Malformed, "%q is not a sequence number", shorten(lines[1], 80))
	}
	c.Seq = seq
	if !hashPattern.MatchString(lines[2]) {
		return Checkpoint{}, reject(Malformed, "%q is not a hash (64 lower-case hex characters)", shorten(lines[2], 80))
	}
	c.Hash = lines[2]
	ts, ok := strings.CutPrefix(lines[3], "time ")
	t, err := time.Parse(timeLayout, ts)
	if !ok || err != nil {
		return Checkpoint{}, reject(Malformed, "%q is not a time line", shorten(lines[3], 80))
	}
	c.Time = t
	return c, nil
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Read reads notes one after another from r (a checkpoint log, or text a
// caller passed) and checks each with v. Blank lines between notes are
// skipped; a note that cannot be trusted is returned as rejected and reading
// goes on. source names r in the positions of what is returned
// ("<source>:<line>"). It fails only when r cannot be read.
func (v *Verifier) Read(r io.Reader, source string) (valid []Signed, rejected []Rejected, err error) {
	br := bufio.NewReaderSize(r, maxNote)
	var (
		note     bytes.Buffer
		start, n int  // line numbers: the note's first line, the current one
		inSigs   bool // past the blank line before the signatures
		tooLong  bool // the note is longer than maxNote: only its start is kept
	)
	flush := func() {
		if note.Len() == 0 {
			return
		}
		where := fmt.Sprintf("%s:%d", source, start)
		text := note.String()
		var (
			c    Checkpoint
			nerr *Error
		)
		if tooLong {
			nerr = reject(Malformed, "the note is longer than %d bytes", maxNote)
		} else {
			c, nerr = v.open(text)
		}
		if nerr != nil {
			rejected = append(rejected, Rejected{Source: where, Problem: nerr.Problem, Detail: nerr.Detail, Note: shorten(text, maxShown)})
		} else {
			valid = append(valid, Signed{Checkpoint: c, Note: text, Source: where})
		}
		note.Reset()
		inSigs, tooLong = false, false
	}
	for {
		line, long, err := readLine(br)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read checkpoints from %s (line %d): %w", source, n+1, err)
		}
		n++
		switch {
		case line == "" && note.Len() == 0:
			continue // between notes
		case line == "" && !inSigs:
			inSigs = true // the blank line before the signatures
		case line == "" && inSigs:
			flush() // the blank line after a note
			continue
		case inSigs && !strings.HasPrefix(line, sigPrefix):
			flush() // a note without the blank line after it: the next one starts
		}
		if note.Len() == 0 {
			start = n
		}
		if long || note.Len()+len(line)+1 > maxNote {
			tooLong = true
			line = shorten(line, maxShown)
		}
		if note.Len() < maxNote {
			note.WriteString(line)
			note.WriteByte('\n')
		}
	}
	flush()
	return valid, rejected, nil
}

// readLine returns the next line of br without its newline. A line longer
// than br's buffer is cut there (long reports it) and the rest skipped. It
// returns io.EOF only when nothing is left.
func readLine(br *bufio.Reader) (line string, long bool, err error) {
	b, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		line = string(b)
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		if errors.Is(err, io.EOF) {
			err = nil
		}
		return line, true, err
	case errors.Is(err, io.EOF) && len(b) > 0:
		return string(b), false, nil // the last line has no newline
	case err != nil:
		return "", false, err
	}
	return string(b[:len(b)-1]), false, nil
}

// ReadFile reads the checkpoint log at path (see Read); source is the
// file's name as it should appear in positions.
func (v *Verifier) ReadFile(path, source string) (valid []Signed, rejected []Rejected, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return v.Read(f, source)
}

// Append writes note, and the blank line after it, at the end of the
// checkpoint log at path (created when missing) and syncs it to disk. The
// file is opened for each note, so an operator may move it away (rotate it)
// at any time.
func Append(path, note string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open checkpoint log: %w", err)
	}
	if _, err := f.WriteString(note + "\n"); err != nil {
		f.Close()
		return fmt.Errorf("write checkpoint log: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync checkpoint log: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close checkpoint log: %w", err)
	}
	return nil
}
