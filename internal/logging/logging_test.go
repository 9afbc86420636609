package logging

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestScrubRemovesSecretShapedStrings(t *testing.T) {
	secrets := []string{
		"Bearer abcdefghijklmnop1234",
		"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlLXZhbHVl",
		"password=hunter2hunter2",
		`"api_key": "k-123456789"`,
		"sk-ABCDEFGHIJKLMNOPQRSTUVWX",
		"ghp_abcdefghijklmnopqrstuvwx",
		"AKIAABCDEFGHIJKLMNOP",
		"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
		"postgres://app:s3cretpw@db:5432/x",
		// A word after the key is a secret too when no sentence goes on, or
		// when it is not letters only.
		"password: hunter2hunter2 was refused",
		"password: hunter\n",
		"token:hunter more words",
	}
	for _, s := range secrets {
		got := Scrub("before " + s + " after")
		for _, frag := range []string{"abcdefghijklmnop1234", "c2lnbmF0dXJlLXZhbHVl", "hunter2", "k-123456789", "ABCDEFGHIJKLMNOPQRSTUVWX", "abcdefghijklmnopqrstuvwx", "AKIAABCDEFGHIJKLMNOP", "MIIEow", "s3cretpw", "hunter"} {
			if strings.Contains(s, frag) && strings.Contains(got, frag) {
				t.Errorf("Scrub(%q) = %q, still contains %q", s, got, frag)
			}
		}
		if !strings.Contains(got, "[REDACTED]") {
			t.Errorf("Scrub(%q) = %q, want a [REDACTED] marker", s, got)
		}
	}
}

// TestScrubDoesNotDependOnPatternOrder scrubs one secret of each shape with
// the patterns in every rotation and in reverse: each pattern carries its
// own replacement, so the parts it keeps (a key's name, a URL's user) stay
// whatever the order.
func TestScrubDoesNotDependOnPatternOrder(t *testing.T) {
	cases := []struct{ in, want string }{
		{"auth Bearer abcdefghijklmnop1234 sent", "auth [REDACTED] sent"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJlLXZhbHVl sent", "jwt [REDACTED] sent"},
		{"dial: password=hunter2hunter2 refused", "dial: password=[REDACTED] refused"},
		{`{"api_key": "k-123456789"}`, `{"api_key": "[REDACTED]"}`},
		{"Token: abc123 expired", "Token: [REDACTED] expired"},
		{"key sk-ABCDEFGHIJKLMNOPQRSTUVWX used", "key [REDACTED] used"},
		{"pat ghp_abcdefghijklmnopqrstuvwx used", "pat [REDACTED] used"},
		{"id AKIAABCDEFGHIJKLMNOP used", "id [REDACTED] used"},
		{"slack xoxb-1234567890-abcdef used", "slack [REDACTED] used"},
		{"pem -----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY----- end", "pem [REDACTED] end"},
		{"connect postgres://app:s3cretpw@db:5432/x failed", "connect postgres://app:[REDACTED]@db:5432/x failed"},
	}
	orders := map[string][]secretPattern{"reversed": slices.Clone(secretPatterns)}
	slices.Reverse(orders["reversed"])
	for i := range secretPatterns {
		orders[fmt.Sprintf("rotated by %d", i)] = append(slices.Clone(secretPatterns[i:]), secretPatterns[:i]...)
	}
	for _, c := range cases {
		if got := Scrub(c.in); got != c.want {
			t.Errorf("Scrub(%q) = %q, want %q", c.in, got, c.want)
		}
		for name, patterns := range orders {
			if got := scrub(patterns, c.in); got != c.want {
				t.Errorf("patterns %s: scrub(%q) = %q, want %q", name, c.in, got, c.want)
			}
		}
	}
	// Every shape is covered above: a pattern nothing here matches would be
	// a pattern no test checks.
	for _, p := range secretPatterns {
		if !slices.ContainsFunc(cases, func(c struct{ in, want string }) bool { return p.re.MatchString(c.in) }) {
			t.Errorf("no case matches the %s pattern", p.name)
		}
	}
}

func TestScrubKeepsOrdinaryText(t *testing.T) {
	for _, s := range []string{
		"task tsk_01 moved to running", "description: value length must be at least 1 characters", "token count 12",
		// A key that names a secret, followed by a sentence: a violation on a
		// field named so, a missing setting.
		"token: value is required", "secret: value length must be at least 16 characters",
		"the service lacks github.token: GitHub is not configured on this mesh",
	} {
		if got := Scrub(s); got != s {
			t.Errorf("Scrub(%q) = %q, want unchanged", s, got)
		}
	}
}

func TestLoggerRedactsSecretKeysAndValues(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, ParseLevel("debug"))
	log.Info("call", "authorization", "anything", "detail", "failed with Bearer abcdefghijklmnopqrstu", "ok", "plain")
	out := buf.String()
	if strings.Contains(out, "anything") || strings.Contains(out, "abcdefghijklmnopqrstu") {
		t.Fatalf("log line leaks a secret: %s", out)
	}
	if !strings.Contains(out, `"ok":"plain"`) {
		t.Fatalf("log line lost an ordinary attribute: %s", out)
	}
}

func TestLoggerScrubsErrorsAndMessages(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, ParseLevel("debug"))
	log.Error("connect postgres://app:s3cretpw@db/x failed", "err", errors.New("dial: password=hunter2hunter2 refused"))
	out := buf.String()
	if strings.Contains(out, "s3cretpw") || strings.Contains(out, "hunter2hunter2") {
		t.Fatalf("log line leaks a secret: %s", out)
	}
	if !strings.Contains(out, "dial: password=") {
		t.Fatalf("error text lost: %s", out)
	}
}
