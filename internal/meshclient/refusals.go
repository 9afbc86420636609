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
// edge's tool bindings use it): every answer is passed on except one a
// service's HTTP server wrote in plain text instead of the protocol's own
// error — net/http's refusal of a request it could not read ("400 Bad
// Request: …", "431 Request Header Fields Too Large") or a server's "not
// serving" while it drains. No handler saw such a call, so it is a
// transport fault, like a refused connection: Connect reports it as
// unavailable, and a retry (with the call's idempotency key) is safe.
// Connect alone reads a plain 400 as internal, and only its status, not
// the reason net/http wrote, would reach the caller's log.
func ForServices(hc connect.HTTPClient) connect.HTTPClient {
	if r, ok := hc.(refusals); ok {
		return r
	}
	return refusals{hc}
}

type refusals struct{ next connect.HTTPClient }

// refusalText is how much of a refusal's body its error keeps.
const refusalText = 256

func (r refusals) Do(req *http.Request) (*http.Response, error) {
	res, err := r.next.Do(req)
	if err != nil || res.StatusCode < 400 || !isPlainText(res.Header.Get("Content-Type")) {
		return res, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, refusalText))
	return nil, fmt.Errorf("%s %s was answered %s by the service's HTTP server, not by the service: %q",
		req.Method, req.URL.Path, res.Status, strings.TrimSpace(string(body)))
}

func isPlainText(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "text/plain"
}
