// Package logging builds the JSON slog logger every toolmesh process uses:
// it scrubs secret-shaped values before anything is written, and a line
// logged with a context inside a span carries the span's trace_id and
// span_id.
package logging

import (
	"io"
	"log/slog"
	"regexp"
	"strings"
	"unicode"
)

// New returns a JSON logger writing to w at the given level. Attribute values
// that look like secrets (bearer tokens, JWTs, keys, passwords) are replaced
// with "[REDACTED]" before they are written. Lines logged with a context
// (InfoContext, ...) inside a span carry "trace_id" and "span_id".
func New(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(WithTrace(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       level,
		ReplaceAttr: replaceAttr,
	})))
}

// Discard returns a logger that writes nothing (for tests and benchmarks).
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ParseLevel maps "debug", "info", "warn" and "error" to a level; anything
// else is info.
func ParseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// secretKeys are attribute keys whose values are never logged.
var secretKeys = []string{"password", "passwd", "secret", "token", "api_key", "apikey", "authorization", "private_key", "credential"}

func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	key := strings.ToLower(a.Key)
	for _, s := range secretKeys {
		if strings.Contains(key, s) {
			return slog.String(a.Key, redacted)
		}
	}
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); s != "" {
			if scrubbed := Scrub(s); scrubbed != s {
				return slog.String(a.Key, scrubbed)
			}
		}
	case slog.KindAny:
		// Errors are written as their text: scrub it too.
		if err, ok := a.Value.Any().(error); ok && err != nil {
			return slog.String(a.Key, Scrub(err.Error()))
		}
	}
	return a
}

const redacted = "[REDACTED]"

// secretPattern is one shape of secret in free text and what replaces a
// match. The replacement is a regexp template that names the groups it keeps
// (a key's name, a URL's scheme and user), so each pattern carries its own
// replacement and their order in secretPatterns does not matter.
type secretPattern struct {
	name    string
	re      *regexp.Regexp
	replace string
	// prose, if set, reports that the match at loc in s is a sentence, not
	// a secret, and stays as it is.
	prose func(s string, loc []int) bool
}

// secretPatterns match secret-shaped substrings anywhere in free text.
var secretPatterns = []secretPattern{
	{name: "bearer token", re: regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}`), replace: redacted},
	// Three base64url segments, the first starting with a JSON object.
	{name: "JWT", re: regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*`), replace: redacted},
	// key=value / key: value pairs whose key names a secret: the key stays.
	{
		name:    "secret key-value pair",
		re:      regexp.MustCompile(`(?i)\b(?P<key>password|passwd|secret|token|api[_-]?key|private[_-]?key|access[_-]?key)\b(?P<sep>\s*[:=]\s*|"\s*:\s*")(?P<value>[^\s",;&]+)`),
		replace: "${key}${sep}" + redacted,
		prose:   sentenceGoesOn,
	},
	// Well-known provider key prefixes.
	{name: "provider key", re: regexp.MustCompile(`\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}`), replace: redacted},
	{name: "GitHub token", re: regexp.MustCompile(`\b(ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}`), replace: redacted},
	{name: "AWS access key id", re: regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`), replace: redacted},
	{name: "Slack token", re: regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`), replace: redacted},
	{name: "PEM private key", re: regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`), replace: redacted},
	// scheme://user:pass@host: the scheme and user stay.
	{
		name:    "URL credentials",
		re:      regexp.MustCompile(`(?i)\b(?P<userinfo>[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@`),
		replace: "${userinfo}" + redacted + "@",
	},
}

// Scrub replaces secret-shaped substrings of s with "[REDACTED]". It is used
// for log values and for any error message that leaves a process.
func Scrub(s string) string {
	return scrub(secretPatterns, s)
}

func scrub(patterns []secretPattern, s string) string {
	for _, p := range patterns {
		if !p.re.MatchString(s) {
			continue
		}
		if p.prose == nil {
			s = p.re.ReplaceAllString(s, p.replace)
			continue
		}
		var b []byte
		last := 0
		for _, loc := range p.re.FindAllStringSubmatchIndex(s, -1) {
			if p.prose(s, loc) {
				continue
			}
			b = append(b, s[last:loc[0]]...)
			b = p.re.ExpandString(b, p.replace, s, loc)
			last = loc[1]
		}
		s = string(append(b, s[last:]...))
	}
	return s
}

// sentenceGoesOn reports that a key-value match is prose: "key: word" whose
// word is letters only and followed by more words, as in "token: value is
// required" (a violation on a field named token) or "the service lacks
// github.token: GitHub is not configured". A value with a digit or a
// symbol, after "=" or in quotes, or ending its line, is taken for a secret.
func sentenceGoesOn(s string, loc []int) bool {
	sep, value := s[loc[4]:loc[5]], s[loc[6]:loc[7]]
	if strings.TrimSpace(sep) != ":" || sep == ":" {
		return false
	}
	for _, r := range value {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	rest := s[loc[1]:]
	return len(rest) > 1 && rest[0] == ' ' && unicode.IsLetter(rune(rest[1]))
}
