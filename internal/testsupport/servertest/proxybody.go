package servertest

import (
	"bytes"
	"io"
	"net/http"
)

// BufferedBodies reads each request's body into memory before h (a
// reverse proxy) forwards it. A net/http server closes a request's body
// as soon as the handler starts its response; a proxy that streams the
// body on and flushes the upstream's first bytes (an SSE answer) can then
// meet its transport reading the closed body once more, after the last
// byte, to check for its end: the transport drops the upstream connection
// and the answer being streamed is cut ("use of closed network
// connection"; golang/go#40747). With the body in memory the transport
// never reads the inbound connection.
func BufferedBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, "the request body could not be read", http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
			r.ContentLength = int64(len(body))
		}
		h.ServeHTTP(w, r)
	})
}
