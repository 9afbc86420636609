// Package bearer reads the bearer token of a request (RFC 6750 §2.1): one
// Authorization header carrying one credential. A request with two headers,
// or two credentials in one, is ambiguous and refused, so that nothing in
// front of a service (a proxy, a WAF, a log) can disagree with it about who
// is calling.
package bearer

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

var (
	// ErrMissing is a request without a bearer credential: no
	// Authorization header, an empty one, or one of another scheme.
	ErrMissing = errors.New("no bearer token in the Authorization header")
	// ErrAmbiguous is a request with more than one Authorization header or
	// more than one credential in it; it answers 400 invalid_request.
	ErrAmbiguous = errors.New("ambiguous credentials")
)

// Token returns the request's bearer token: ErrMissing when there is none,
// an error wrapping ErrAmbiguous when there is more than one.
func Token(h http.Header) (string, error) {
	values := h.Values("Authorization")
	switch len(values) {
	case 0:
		return "", ErrMissing
	case 1:
	default:
		return "", fmt.Errorf("%w: the request has %d Authorization headers; send exactly one", ErrAmbiguous, len(values))
	}
	v := strings.TrimSpace(values[0])
	scheme, token, _ := strings.Cut(v, " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") {
		if strings.Contains(v, ",") && containsBearer(v) {
			return "", fmt.Errorf("%w: the Authorization header carries more than one credential; send exactly one", ErrAmbiguous)
		}
		return "", ErrMissing
	}
	if token == "" {
		return "", ErrMissing
	}
	// A b64token (RFC 6750 §2.1) has no spaces and no commas: a list of
	// credentials folded into one header does.
	if strings.ContainsAny(token, " \t,") {
		return "", fmt.Errorf("%w: the Authorization header carries more than one credential; send exactly one", ErrAmbiguous)
	}
	return token, nil
}

// containsBearer reports whether a comma-separated list of credentials
// includes a bearer credential.
func containsBearer(v string) bool {
	for _, part := range strings.Split(v, ",") {
		scheme, _, _ := strings.Cut(strings.TrimSpace(part), " ")
		if strings.EqualFold(scheme, "Bearer") {
			return true
		}
	}
	return false
}
