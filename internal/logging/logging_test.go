package logging

import (
	"bytes"
	"errors"
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
	}
	for _, s := range secrets {
		got := Scrub("before " + s + " after")
		for _, frag := range []string{"abcdefghijklmnop1234", "c2lnbmF0dXJlLXZhbHVl", "hunter2", "k-123456789", "ABCDEFGHIJKLMNOPQRSTUVWX", "abcdefghijklmnopqrstuvwx", "AKIAABCDEFGHIJKLMNOP", "MIIEow", "s3cretpw"} {
			if strings.Contains(s, frag) && strings.Contains(got, frag) {
				t.Errorf("Scrub(%q) = %q, still contains %q", s, got, frag)
			}
		}
		if !strings.Contains(got, "[REDACTED]") {
			t.Errorf("Scrub(%q) = %q, want a [REDACTED] marker", s, got)
		}
	}
}

func TestScrubKeepsOrdinaryText(t *testing.T) {
	for _, s := range []string{"task tsk_01 moved to running", "description: value length must be at least 1 characters", "token count 12"} {
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
