package bearer_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/toolmesh/toolmesh/internal/bearer"
)

func TestToken(t *testing.T) {
	cases := []struct {
		name   string
		values []string
		token  string
		err    error
	}{
		{"one bearer token", []string{"Bearer abc.def-ghi_~+/="}, "abc.def-ghi_~+/=", nil},
		{"scheme in any case", []string{"bearer abc"}, "abc", nil},
		{"extra spaces", []string{"  Bearer   abc  "}, "abc", nil},
		{"no header", nil, "", bearer.ErrMissing},
		{"empty header", []string{""}, "", bearer.ErrMissing},
		{"scheme without a token", []string{"Bearer"}, "", bearer.ErrMissing},
		{"another scheme", []string{"Basic YWxpY2U6cHc="}, "", bearer.ErrMissing},
		{"digest parameters are not a second credential", []string{`Digest username="a", realm="r"`}, "", bearer.ErrMissing},
		{"two headers", []string{"Bearer alice", "Bearer bob"}, "", bearer.ErrAmbiguous},
		{"a valid token and junk", []string{"Bearer alice", "junk"}, "", bearer.ErrAmbiguous},
		{"two empty headers", []string{"", ""}, "", bearer.ErrAmbiguous},
		{"two credentials folded into one header", []string{"Bearer alice, Bearer bob"}, "", bearer.ErrAmbiguous},
		{"two tokens after one scheme", []string{"Bearer alice bob"}, "", bearer.ErrAmbiguous},
		{"a bearer credential after another scheme", []string{"Basic YWxpY2U6cHc=, Bearer bob"}, "", bearer.ErrAmbiguous},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range c.values {
				h.Add("Authorization", v)
			}
			got, err := bearer.Token(h)
			if got != c.token || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
				t.Errorf("Token(%q) = %q, %v; want %q, %v", c.values, got, err, c.token, c.err)
			}
		})
	}
}
