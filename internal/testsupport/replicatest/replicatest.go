// Package replicatest puts several replicas of an MCP server behind one
// address, as a load balancer without affinity does, for tests of what a
// client sees when its requests land on different replicas.
package replicatest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
)

// Replica is one server behind the balancer.
type Replica struct {
	Name string
	// Base is its root URL (http://host:port); requests keep their path.
	Base *url.URL
}

// Hop is one request as the balancer passed it on.
type Hop struct {
	Replica string
	Method  string // the HTTP method
	// RPC is the JSON-RPC method of a POST, "response" for a client's
	// answer to a server request.
	RPC    string
	Tool   string // the tool of a tools/call
	Status int
}

// RoundRobin sends POSTs and DELETEs to the replicas in turn, and GETs in
// turn too but counted apart (an MCP client opens its stream when it
// likes, so counting them apart keeps the turn of POSTs predictable). The
// first GET goes to the second replica, so a client's stream does not go
// where its session began. It records every hop.
type RoundRobin struct {
	// URL is the balancer's root URL.
	URL   string
	proxy *httputil.ReverseProxy

	mu       sync.Mutex
	replicas []Replica
	down     map[string]bool
	turns    map[bool]int // by "is a GET"
	hops     []Hop
}

// New serves a balancer in front of replicas until the test ends.
func New(tb testing.TB, replicas ...Replica) *RoundRobin {
	tb.Helper()
	rr := &RoundRobin{replicas: replicas, down: map[string]bool{}, turns: map[bool]int{true: 1}}
	rr.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(pr.In.Context().Value(replicaKey{}).(*url.URL))
		},
		FlushInterval: -1,
		// A replica that is killed breaks the responses it was streaming.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	// Requests go on from memory: the replicas' answers stream (SSE).
	hs := httptest.NewServer(servertest.BufferedBodies(rr))
	tb.Cleanup(hs.Close)
	rr.URL = hs.URL
	return rr
}

type replicaKey struct{}

// next is the replica the next request of a kind goes to, or nil.
func (rr *RoundRobin) next(get bool) *Replica {
	n := len(rr.replicas)
	for i := range n {
		r := &rr.replicas[(rr.turns[get]+i)%n]
		if !rr.down[r.Name] {
			return r
		}
	}
	return nil
}

// Remove takes a replica out of the rotation (its pod is gone).
func (rr *RoundRobin) Remove(name string) {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	rr.down[name] = true
}

// NextPOST names the replica the next POST (or DELETE) goes to.
func (rr *RoundRobin) NextPOST() string {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	if r := rr.next(false); r != nil {
		return r.Name
	}
	return ""
}

// TurnTo pings until the next POST goes to the replica name.
func (rr *RoundRobin) TurnTo(tb testing.TB, cs *mcp.ClientSession, name string) {
	tb.Helper()
	for rr.NextPOST() != name {
		if err := cs.Ping(context.Background(), nil); err != nil {
			tb.Fatal(err)
		}
	}
}

// Hops returns the requests passed on so far, in order.
func (rr *RoundRobin) Hops() []Hop {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return slices.Clone(rr.hops)
}

func (rr *RoundRobin) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := Hop{Method: req.Method}
	if req.Method == http.MethodPost {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &msg)
		h.RPC, h.Tool = msg.Method, msg.Params.Name
		if h.RPC == "" {
			h.RPC = "response"
		}
	}
	get := req.Method == http.MethodGet
	rr.mu.Lock()
	r := rr.next(get)
	i := len(rr.hops)
	if r != nil {
		for &rr.replicas[rr.turns[get]%len(rr.replicas)] != r {
			rr.turns[get]++
		}
		h.Replica = r.Name
	}
	rr.turns[get]++
	rr.hops = append(rr.hops, h)
	rr.mu.Unlock()
	if r == nil {
		http.Error(w, "no replica", http.StatusServiceUnavailable)
		return
	}
	sw := &statusWriter{ResponseWriter: w, record: func(code int) {
		rr.mu.Lock()
		defer rr.mu.Unlock()
		rr.hops[i].Status = code
	}}
	rr.proxy.ServeHTTP(sw, req.WithContext(context.WithValue(req.Context(), replicaKey{}, r.Base)))
}

// statusWriter records the status before the client can see it, so a hop
// is complete by the time its client has its answer.
type statusWriter struct {
	http.ResponseWriter
	record  func(int)
	written bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.written {
		w.written = true
		w.record(code)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if !w.written {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// AnsweredElsewhere reports whether a tools/call of tool went to replica
// and a client's answer to a server request (a response before the next
// call) was accepted by another replica.
func AnsweredElsewhere(hops []Hop, tool, replica string) bool {
	for i, h := range hops {
		if h.RPC != "tools/call" || h.Tool != tool || h.Replica != replica {
			continue
		}
		for _, next := range hops[i+1:] {
			if next.RPC == "tools/call" {
				break
			}
			if next.RPC == "response" && next.Replica != replica && next.Status == http.StatusAccepted {
				return true
			}
		}
	}
	return false
}
