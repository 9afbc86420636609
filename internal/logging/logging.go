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

// secretPatterns match secret-shaped substrings anywhere in free text.
var secretPatterns = []*regexp.Regexp{
	// Authorization-style bearer tokens.
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}`),
	// JWTs: three base64url segments, the first starting with a JSON object.
	regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*`),
	// key=value / key: value pairs whose key names a secret.
	regexp.MustCompile(`(?i)\b(password|passwd|secret|token|api[_-]?key|private[_-]?key|access[_-]?key)\b(\s*[:=]\s*|"\s*:\s*")[^\s",;&]+`),
	// Well-known provider key prefixes.
	regexp.MustCompile(`\b(sk|pk|rk)-[A-Za-z0-9_-]{16,}`),
	regexp.MustCompile(`\b(ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}`),
	regexp.MustCompile(`\bAKIA[0-9A-Z]{16}\b`),
	regexp.MustCompile(`\bxox[abprs]-[A-Za-z0-9-]{10,}`),
	// PEM blocks.
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)`),
	// Credentials inside URLs: scheme://user:pass@host.
	regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^/\s@]+@`),
}

// Scrub replaces secret-shaped substrings of s with "[REDACTED]". It is used
// for log values and for any error message that leaves a process.
func Scrub(s string) string {
	for i, re := range secretPatterns {
		if !re.MatchString(s) {
			continue
		}
		switch i {
		case 2:
			s = re.ReplaceAllString(s, "${1}${2}"+redacted)
		case len(secretPatterns) - 1:
			s = re.ReplaceAllString(s, "${1}"+redacted+"@")
		default:
			s = re.ReplaceAllString(s, redacted)
		}
	}
	return s
}
