// Package jcs writes JSON in the canonical form of RFC 8785, the JSON
// Canonicalization Scheme: no insignificant whitespace, object members
// sorted by the UTF-16 code units of their names, numbers in ECMAScript
// Number-to-String form, and strings with the minimal escaping of
// ECMAScript's JSON.stringify. Two JSON texts with the same data have the
// same canonical bytes, so a hash over them identifies the data.
//
// The input must be I-JSON (RFC 7493), as RFC 8785 requires: valid UTF-8, no
// lone surrogates, no duplicate member names. Numbers are IEEE 754 doubles.
// One deliberate restriction goes beyond the RFC: an integer literal (no
// fraction, no exponent) that a double would round, such as
// 9007199254740993, is refused rather than rounded, so two different
// integers never canonicalise to the same bytes. Large integers belong in
// strings.
package jcs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of arrays and objects.
const maxDepth = 512

// Transform returns the canonical form of the JSON text data.
func Transform(data []byte) ([]byte, error) {
	p := parser{data: data}
	p.skipSpace()
	out, err := p.value(make([]byte, 0, len(data)), 0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos != len(p.data) {
		return nil, p.errorf("unexpected data after the JSON value")
	}
	return out, nil
}

// Marshal encodes v with encoding/json and returns its canonical form.
func Marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return Transform(b)
}

type parser struct {
	data []byte
	pos  int
}

// SyntaxError reports JSON that cannot be canonicalised.
type SyntaxError struct {
	// Offset is the byte offset where the problem was found.
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("jcs: %s (at byte %d)", e.msg, e.Offset)
}

func (p *parser) errorf(format string, args ...any) error {
	return &SyntaxError{Offset: p.pos, msg: fmt.Sprintf(format, args...)}
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value(out []byte, depth int) ([]byte, error) {
	if p.pos >= len(p.data) {
		return nil, p.errorf("unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object(out, depth+1)
	case c == '[':
		return p.array(out, depth+1)
	case c == '"':
		s, err := p.string()
		if err != nil {
			return nil, err
		}
		return appendString(out, s), nil
	case c == '-' || c >= '0' && c <= '9':
		return p.number(out)
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.data)-p.pos >= len(lit) && string(p.data[p.pos:p.pos+len(lit)]) == lit {
				p.pos += len(lit)
				return append(out, lit...), nil
			}
		}
		return nil, p.errorf("invalid character %q looking for a value", c)
	}
}

type member struct {
	name  string
	units []uint16
	value []byte
}

func (p *parser) object(out []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, p.errorf("nesting deeper than %d", maxDepth)
	}
	p.pos++ // '{'
	var members []member
	seen := map[string]bool{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return append(out, "{}"...), nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.errorf("expected a member name")
		}
		name, err := p.string()
		if err != nil {
			return nil, err
		}
		if seen[name] {
			return nil, p.errorf("duplicate member name %q", name)
		}
		seen[name] = true
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.errorf("expected ':' after a member name")
		}
		p.pos++
		p.skipSpace()
		v, err := p.value(nil, depth)
		if err != nil {
			return nil, err
		}
		members = append(members, member{name: name, units: utf16.Encode([]rune(name)), value: v})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in an object")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] != '}' {
			return nil, p.errorf("expected ',' or '}' in an object")
		}
		p.pos++
		break
	}
	// RFC 8785 §3.2.3: members sorted by their names as arrays of UTF-16
	// code units, compared as unsigned integers.
	slices.SortFunc(members, func(a, b member) int { return slices.Compare(a.units, b.units) })
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, m.name)
		out = append(out, ':')
		out = append(out, m.value...)
	}
	return append(out, '}'), nil
}

func (p *parser) array(out []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, p.errorf("nesting deeper than %d", maxDepth)
	}
	p.pos++ // '['
	out = append(out, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return append(out, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			out = append(out, ',')
		}
		p.skipSpace()
		var err error
		if out, err = p.value(out, depth); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.errorf("unexpected end of input in an array")
		}
		if p.data[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.data[p.pos] != ']' {
			return nil, p.errorf("expected ',' or ']' in an array")
		}
		p.pos++
		return append(out, ']'), nil
	}
}

// string parses a JSON string at p.pos and returns its value.
func (p *parser) string() (string, error) {
	p.pos++ // '"'
	var b []byte
	for {
		if p.pos >= len(p.data) {
			return "", p.errorf("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(b), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			b = utf8.AppendRune(b, r)
		case c < 0x20:
			return "", p.errorf("control character U+%04X in a string must be escaped", c)
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errorf("invalid UTF-8")
			}
			b = append(b, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape parses one escape sequence at p.pos (the backslash) and returns the
// character it stands for. A \u escape of a surrogate must be one half of a
// pair written as two escapes.
func (p *parser) escape() (rune, error) {
	if p.pos+1 >= len(p.data) {
		return 0, p.errorf("unterminated escape")
	}
	c := p.data[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return rune(c), nil
	case 'b':
		return '\b', nil
	case 'f':
		return '\f', nil
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if !utf16.IsSurrogate(r) {
			return r, nil
		}
		if r >= 0xDC00 || p.pos+1 >= len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
			return 0, p.errorf("lone surrogate \\u%04x", r)
		}
		p.pos += 2
		lo, err := p.hex4()
		if err != nil {
			return 0, err
		}
		pair := utf16.DecodeRune(r, lo)
		if pair == utf8.RuneError {
			return 0, p.errorf("lone surrogate \\u%04x", r)
		}
		return pair, nil
	}
	return 0, p.errorf("invalid escape \\%c", c)
}

func (p *parser) hex4() (rune, error) {
	if p.pos+4 > len(p.data) {
		return 0, p.errorf("short \\u escape")
	}
	n, err := strconv.ParseUint(string(p.data[p.pos:p.pos+4]), 16, 16)
	if err != nil {
		return 0, p.errorf("invalid \\u escape")
	}
	p.pos += 4
	return rune(n), nil
}

func (p *parser) number(out []byte) ([]byte, error) {
	start := p.pos
	integer := true
	if p.data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		p.digits()
	default:
		return nil, p.errorf("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		integer = false
		p.pos++
		if p.digits() == 0 {
			return nil, p.errorf("invalid number: no digits after '.'")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		integer = false
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return nil, p.errorf("invalid number: no digits in the exponent")
		}
	}
	lit := string(p.data[start:p.pos])
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, &SyntaxError{Offset: start, msg: fmt.Sprintf("number %s does not fit in a double", lit)}
	}
	if integer && !exactInteger(lit, f) {
		return nil, &SyntaxError{Offset: start, msg: fmt.Sprintf("integer %s would be rounded to fit a double; send it as a string", lit)}
	}
	return AppendNumber(out, f)
}

// exactInteger reports whether the integer literal lit is the one decimal
// form of its double f: the shortest digits that read back as f. Any other
// integer literal names a value f only approximates (9007199254740993 reads
// as 9007199254740992), so accepting it would let two different integers
// share one canonical form. Every integer of magnitude below 2^53 passes, and
// so does every integer JCS itself writes.
func exactInteger(lit string, f float64) bool {
	return strconv.FormatFloat(f, 'f', -1, 64) == lit
}

func (p *parser) digits() int {
	n := 0
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
		n++
	}
	return n
}

// ErrNotFinite is returned for NaN and infinities, which JSON cannot carry.
var ErrNotFinite = errors.New("jcs: NaN and infinities have no JSON form")

// AppendNumber appends f in the form of ECMAScript's Number.prototype.toString
// (ECMA-262 Number::toString), as RFC 8785 §3.2.2.3 requires.
func AppendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, ErrNotFinite
	}
	if f == 0 { // also -0
		return append(dst, '0'), nil
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// The shortest digits that round-trip, closest to f: "d.ddde±x".
	s := strconv.FormatFloat(f, 'e', -1, 64)
	e := len(s) - 1
	for s[e] != 'e' {
		e--
	}
	exp, _ := strconv.Atoi(s[e+1:])
	digits := make([]byte, 0, e)
	for _, c := range []byte(s[:e]) {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	k := len(digits)
	n := exp + 1 // the value is 0.digits × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst, nil
}

// appendString appends s as a JSON string with the escaping of RFC 8785
// §3.2.2.2: only '"', '\\' and control characters are escaped, the latter
// with the short forms where JSON has them and \u00xx (lower-case hex)
// otherwise. Everything else is written as UTF-8.
func appendString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			dst = append(dst, '\\', '"')
		case c == '\\':
			dst = append(dst, '\\', '\\')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}
