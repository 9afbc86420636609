package egress_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/egress"
)

func TestCategory(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1":              egress.CategoryLoopback,
		"127.8.9.10":             egress.CategoryLoopback,
		"::1":                    egress.CategoryLoopback,
		"::ffff:127.0.0.1":       egress.CategoryLoopback, // IPv4-mapped
		"64:ff9b::7f00:1":        egress.CategoryLoopback, // NAT64 of 127.0.0.1
		"2002:7f00:1::":          egress.CategoryLoopback, // 6to4 of 127.0.0.1
		"10.1.2.3":               egress.CategoryPrivate,
		"172.16.0.1":             egress.CategoryPrivate,
		"172.31.255.255":         egress.CategoryPrivate,
		"192.168.1.1":            egress.CategoryPrivate,
		"100.64.0.1":             egress.CategoryPrivate, // shared address space
		"fd12:3456::1":           egress.CategoryPrivate,
		"::ffff:10.0.0.1":        egress.CategoryPrivate,
		"169.254.1.1":            egress.CategoryLinkLocal,
		"fe80::1":                egress.CategoryLinkLocal,
		"fe80::1%eth0":           egress.CategoryLinkLocal,
		"169.254.169.254":        egress.CategoryMetadata,
		"::ffff:169.254.169.254": egress.CategoryMetadata,
		"64:ff9b::a9fe:a9fe":     egress.CategoryMetadata, // NAT64 of 169.254.169.254
		"fd00:ec2::254":          egress.CategoryMetadata,
		"100.100.100.200":        egress.CategoryMetadata,
		"0.0.0.0":                egress.CategoryUnspecified,
		"::":                     egress.CategoryUnspecified,
		"224.0.0.1":              egress.CategoryMulticast,
		"ff02::1":                egress.CategoryMulticast,
		"255.255.255.255":        egress.CategoryReserved,
		"2001:0:4136:e378::1":    egress.CategoryReserved, // Teredo
		"8.8.8.8":                "",
		"93.184.216.34":          "",
		"172.32.0.1":             "", // just past 172.16.0.0/12
		"172.15.255.255":         "", // just before it
		"100.128.0.1":            "", // just past 100.64.0.0/10
		"169.255.0.1":            "",
		"2606:4700:4700::1111":   "",
		"64:ff9b::808:808":       "", // NAT64 of 8.8.8.8
		"2002:808:808::":         "", // 6to4 of 8.8.8.8
		"::ffff:8.8.4.4":         "",
	} {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			t.Fatalf("parse %s: %v", addr, err)
		}
		if got := egress.Category(a); got != want {
			t.Errorf("Category(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestPolicyAllowsOnlyWhatItLists(t *testing.T) {
	allow, err := egress.ParsePrefixes("127.0.0.1", "10.1.0.0/16", "fd00::/8")
	if err != nil {
		t.Fatal(err)
	}
	p := egress.Policy{Allow: allow}
	for addr, allowed := range map[string]bool{
		"127.0.0.1":       true,
		"127.0.0.2":       false,
		"10.1.200.3":      true,
		"10.2.0.1":        false,
		"fd12::1":         true,
		"169.254.169.254": false,
		"8.8.8.8":         true,
	} {
		err := p.Check("", netip.MustParseAddr(addr))
		if (err == nil) != allowed {
			t.Errorf("Check(%s) = %v, want allowed %v", addr, err, allowed)
		}
		if err != nil && !errors.Is(err, egress.ErrRefused) {
			t.Errorf("Check(%s) error %v is not ErrRefused", addr, err)
		}
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-ip", "127.0.0.1/"} {
		if _, err := egress.ParsePrefixes(bad); err == nil {
			t.Errorf("ParsePrefixes(%q) succeeded", bad)
		}
	}
}

// publicLookup pretends every host resolves to a public address, as a
// hostname did when it was configured before its DNS record changed.
func publicLookup(context.Context, string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
}

func TestCheckURL(t *testing.T) {
	ctx := context.Background()
	p := egress.Policy{Lookup: publicLookup}
	for raw, wantErr := range map[string]string{
		"https://hooks.example.com/T0/B1/s3cr3t":          "",
		"http://93.184.216.34:8080/x":                     "",
		"http://127.0.0.1:9000/hook":                      "loopback",
		"http://[::1]/hook":                               "loopback",
		"http://169.254.169.254/latest/meta-data":         "cloud metadata",
		"http://[::ffff:10.0.0.1]/":                       "private",
		"http://0.0.0.0:80/":                              "unspecified",
		"ftp://hooks.example.com/":                        "scheme",
		"https://user:pass@hooks.example.com/":            "user info",
		"https:///no-host":                                "no host",
		"https://hooks.example.com/%zz":                   "does not parse",
		"http://[fe80::1%25eth0]:80/":                     "link-local",
		"http://[64:ff9b::a9fe:a9fe]/computeMetadata/v1/": "cloud metadata",
	} {
		err := p.CheckURL(ctx, raw)
		switch {
		case wantErr == "" && err != nil:
			t.Errorf("CheckURL(%s) = %v, want ok", raw, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)):
			t.Errorf("CheckURL(%s) = %v, want an error about %q", raw, err, wantErr)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("CheckURL(%s) error %q shows the URL's path", raw, err)
		}
	}
	// The real resolver: localhost resolves to 127.0.0.1 (/etc/hosts).
	if err := (egress.Policy{}).CheckURL(ctx, "http://localhost:8080/hook"); !errors.Is(err, egress.ErrRefused) ||
		!strings.Contains(err.Error(), "localhost (127.0.0.1)") {
		t.Errorf("CheckURL(localhost) = %v, want localhost (127.0.0.1) refused as loopback", err)
	}
	failing := egress.Policy{Lookup: func(context.Context, string) ([]netip.Addr, error) { return nil, errors.New("no such host") }}
	if err := failing.CheckURL(ctx, "https://nowhere.invalid/"); err == nil || !strings.Contains(err.Error(), "cannot resolve host nowhere.invalid") {
		t.Errorf("CheckURL of an unresolvable host = %v", err)
	}
}

// receiver is a local webhook receiver counting the requests it gets.
func receiver(t *testing.T, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if h != nil {
			h(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, p, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClientRefusesAtDialTime(t *testing.T) {
	srv, hits := receiver(t, nil)
	// A hostname that resolves to 127.0.0.1, and that passed the check when
	// it was configured because it resolved to a public address then.
	url := "http://localhost:" + port(t, srv) + "/hooks/secret-token"
	p := egress.Policy{Lookup: publicLookup}
	if err := p.CheckURL(context.Background(), url); err != nil {
		t.Fatalf("configuration-time check: %v", err)
	}
	_, err := p.Client(egress.ClientOptions{}).Post(url, "application/json", strings.NewReader("{}"))
	if !errors.Is(err, egress.ErrRefused) {
		t.Fatalf("POST to localhost = %v, want refused at dial time", err)
	}
	if hits.Load() != 0 {
		t.Errorf("the receiver got %d requests, want none", hits.Load())
	}
	msg := egress.DescribeError(err)
	if strings.Contains(msg, "secret-token") || !strings.Contains(msg, "127.0.0.1") || !strings.Contains(msg, "loopback") {
		t.Errorf("DescribeError = %q, want the refused address and category and no URL path", msg)
	}
	// Literal addresses are checked the same way.
	if _, err := p.Client(egress.ClientOptions{}).Get(srv.URL); !errors.Is(err, egress.ErrRefused) {
		t.Errorf("GET %s = %v, want refused", srv.URL, err)
	}

	// Allowed explicitly, the same request goes through.
	allowed := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	resp, err := allowed.Client(egress.ClientOptions{}).Post(url, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatalf("POST with 127.0.0.1 allowed: %v", err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("the receiver got %d requests, want 1", hits.Load())
	}
}

func TestClientFollowsNoRedirect(t *testing.T) {
	target, targetHits := receiver(t, nil)
	redirector, _ := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	})
	p := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	resp, err := p.Client(egress.ClientOptions{}).Post(redirector.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || targetHits.Load() != 0 {
		t.Errorf("status %d, redirect target hit %d times; want the 307 itself and no hit", resp.StatusCode, targetHits.Load())
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T0/B1/XYZ": "https://hooks.slack.com/…",
		"http://127.0.0.1:9000":                      "http://127.0.0.1:9000",
		"http://127.0.0.1:9000/":                     "http://127.0.0.1:9000",
		"https://u:p@example.com/?token=abc":         "https://example.com/…",
		"::not a url":                                "…",
	} {
		if got := egress.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestClientCapsResponseBodies(t *testing.T) {
	body := strings.Repeat("x", 1000)
	announced, _ := receiver(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) })
	chunked, _ := receiver(t, func(w http.ResponseWriter, _ *http.Request) {
		for range 10 {
			_, _ = w.Write([]byte(body[:100]))
			w.(http.Flusher).Flush() // no Content-Length: the cap applies while reading
		}
	})
	p := egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	for _, tc := range []struct {
		name string
		max  int64
		url  string
		ok   bool
	}{
		{"announced, at the cap", 1000, announced.URL, true},
		{"announced, over the cap", 999, announced.URL, false},
		{"streamed, at the cap", 1000, chunked.URL, true},
		{"streamed, over the cap", 999, chunked.URL, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := p.Client(egress.ClientOptions{MaxResponseBytes: tc.max}).Get(tc.url)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if tc.ok && (err != nil || string(got) != body) {
				t.Errorf("read %d bytes, err %v; want the whole %d-byte body", len(got), err, len(body))
			}
			if !tc.ok && !errors.Is(err, egress.ErrResponseTooLarge) {
				t.Errorf("read %d bytes, err %v; want ErrResponseTooLarge", len(got), err)
			}
			if !tc.ok && int64(len(got)) > tc.max {
				t.Errorf("read %d bytes past the cap of %d", len(got), tc.max)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"30":                            30 * time.Second,
		"0":                             0,
		"-5":                            0,
		"soon":                          0,
		"Sun, 01 Mar 2026 12:01:30 GMT": 90 * time.Second,
		"Sun, 01 Mar 2026 11:59:00 GMT": 0,
	} {
		if got := egress.RetryAfter(http.Header{"Retry-After": {v}}, now); got != want {
			t.Errorf("RetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}
