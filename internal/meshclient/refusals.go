package meshclient

import (
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// ForServices wraps hc for calls to the mesh's services (New and the
// edge's tool bindings use it): every answer is passed on except net/http's
// own refusal of a request it could not read, written in plain text
// instead of the protocol's error ("400 Bad Request: …", "431 Request
// Header Fields Too Large"). No handler saw such a call, so it is a
// transport fault, like a refused connection: Connect reports it as
// unavailable, and a retry (with the call's idempotency key) is safe.
// Connect alone reads a plain 400 as internal, and only its status, not
// the reason net/http wrote, would reach the caller's log. A 404 (no such
// procedure) stays what Connect makes of it: unimplemented.
//
// A client of a Transport alone (HTTP's) is left out: its calls go to the
// Transport directly (Transport.Do). What http.Client adds to a call is
// what the mesh does not use, and it costs a copy of the call's headers
// per call: cookies, a timeout of its own (each call has its deadline),
// and redirects, which would take the call's mesh token elsewhere.
func ForServices(hc connect.HTTPClient) connect.HTTPClient {
	if r, ok := hc.(refusals); ok {
		return r
	}
	if c, ok := hc.(*http.Client); ok && c != nil && c.Jar == nil && c.Timeout == 0 && c.CheckRedirect == nil {
		if t, ok := c.Transport.(*Transport); ok {
			hc = t
		}
	}
	return refusals{hc}
}

type refusals struct{ next connect.HTTPClient }

// refusalText is how much of a refusal's body its error keeps.
const refusalText = 256

func (r refusals) Do(req *http.Request) (*http.Response, error) {
	res, err := r.next.Do(req)
	if err != nil || !refused(res) {
		return res, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, refusalText))
	return nil, fmt.Errorf("%s %s was answered %s by the service's HTTP server, not by the service: %q",
		req.Method, req.URL.Path, res.Status, strings.TrimSpace(string(body)))
}

// refused reports whether res is net/http's refusal of an unreadable
// request.
func refused(res *http.Response) bool {
	if res.StatusCode != http.StatusBadRequest && res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		return false
	}
	mt, _, err := mime.ParseMediaType(res.Header.Get("Content-Type"))
	return err == nil && mt == "text/plain"
}
