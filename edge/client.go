package edge

import (
	"net/http"
	"time"
)

// newServiceClient is the edge's client of the services: HTTP/1.1 over
// kept-alive connections, one per call in flight. Services also speak h2c,
// but a Go HTTP/2 server hands every request between goroutines several
// times; measured under make bench-mesh, a point read cost the tasks
// service 162 µs of CPU over h2c and 103 µs over HTTP/1.1, and the edge 221
// and 182 µs.
func newServiceClient() *http.Client {
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	// Connections are not capped (a long-running call holds one for its
	// wait), and up to 256 per service are kept: closing those beyond the
	// idle limit after every call, under many callers, costs both sides a
	// connection per call.
	//
	// Each connection holds a read and a write buffer for its lifetime, and
	// under many callers there is one connection per call in flight. A
	// service call's request and answer are a few hundred bytes, and
	// larger bodies are read and written past the buffers, so 1 KiB each
	// does instead of net/http's 4 KiB: 6 KiB less per call in flight.
	return &http.Client{Transport: &http.Transport{
		Protocols:           protocols,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		ReadBufferSize:      serviceConnBuffer,
		WriteBufferSize:     serviceConnBuffer,
	}}
}

// serviceConnBuffer is the size of the read and the write buffer of each
// connection to a service.
const serviceConnBuffer = 1 << 10
