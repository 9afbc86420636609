package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// lossyProxy forwards to a service and, for the first call of each
// idempotency key to one procedure, throws the service's answer away and
// answers 503 instead: the call took effect, the caller cannot know.
type lossyProxy struct {
	URL       string
	upstream  string
	procedure string
	client    *http.Client

	mu   sync.Mutex
	seen map[string]bool
	lost int
}

func newLossyProxy(t testing.TB, upstream, procedure string) *lossyProxy {
	t.Helper()
	p := &lossyProxy{upstream: upstream, procedure: procedure, client: servertest.HTTPClient(), seen: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP1(true)
	hs := &http.Server{Handler: p, Protocols: protocols, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		p.client.CloseIdleConnections()
	})
	p.URL = "http://" + lis.Addr().String()
	return p
}

func (p *lossyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req, _ := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if key := r.Header.Get(mesh.HeaderIdempotencyKey); key != "" && r.URL.Path == p.procedure {
		p.mu.Lock()
		first := !p.seen[key]
		p.seen[key] = true
		if first {
			p.lost++
		}
		p.mu.Unlock()
		if first {
			http.Error(w, "the answer was lost on the way back", http.StatusServiceUnavailable)
			return
		}
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

func (p *lossyProxy) lostAnswers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}
