package benchmesh

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/toolmesh/toolmesh/internal/meshclient"
)

// HopAddr is the source address of the bare hop's connections to the
// tasks service (see LoadAddr).
const HopAddr = "127.0.0.4"

// Hop is the floor of any separate hop in front of a service: a bare
// net/http reverse proxy at addr forwarding every request to the service
// at to, over the transport the edge calls services with
// (meshclient.Transport: HTTP/1.1, kept-alive connections, the same idle
// pool and buffers, a small body sent in one write with its headers, each
// call carried on its caller's goroutine), so that the baseline cannot be
// tuned below what the edge is given. It serves until ctx ends.
func Hop(ctx context.Context, addr, to string) error {
	target, err := url.Parse(to)
	if err != nil || target.Host == "" {
		return fmt.Errorf("hop: the service URL %q: %v", to, err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport: meshclient.NewTransport(DialFrom(HopAddr)),
	}
	hs := &http.Server{Addr: addr, Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
