package server

import (
	"net/http"
	"net/http/pprof"
)

// HandlePprof serves Go's profiles under /debug/pprof/ on mux: CPU
// (profile), heap, allocs, goroutine, block, mutex, threadcreate and the
// execution trace, for `go tool pprof http://<addr>/debug/pprof/<name>`.
// Processes mount it on their metrics address only when asked (--pprof):
// a profile shows what a process is doing and costs CPU while it is taken.
func HandlePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
