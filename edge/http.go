package edge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/rpcerror"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// JSON-RPC error codes the edge writes itself.
const (
	codeParseError         = -32700
	codeInvalidRequest     = -32600
	codeInternalError      = -32603
	codeUnauthorized       = -32001
	codeUnsupportedVersion = -32022
)

// rpcError is a JSON-RPC error response.
type rpcError struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   rpcErrorBody    `json:"error"`
}

type rpcErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// writeRPCError answers with status and a JSON-RPC error body: every refusal
// of the edge's HTTP layer is one a JSON-RPC client can read.
func writeRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string, data any) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(rpcError{JSONRPC: "2.0", ID: id, Error: rpcErrorBody{Code: code, Message: msg, Data: data}})
	if err != nil {
		b = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// peek returns the id and method of a single JSON-RPC message body, for
// decisions and error responses made before the SDK reads it (a nil id when
// there is none or it is not a valid id; batch: false when the body is not
// a single object).
func peek(body []byte) (id json.RawMessage, method string, single bool) {
	t := bytes.TrimSpace(body)
	if len(t) == 0 || t[0] != '{' {
		return nil, "", false
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(t, &m) != nil {
		return nil, "", true
	}
	if len(m.ID) > 0 {
		switch m.ID[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			id = m.ID
		}
	}
	return id, m.Method, true
}

// routes is the edge's HTTP surface.
func (e *Edge) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", e.serveMCP)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("ok\n"))
	})
	if e.auth != nil {
		meta := e.auth.Metadata()
		guarded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !e.hostAllowed(r) {
				e.rejectHost(w, r)
				return
			}
			meta.ServeHTTP(w, r)
		})
		for _, p := range e.auth.MetadataPaths() {
			mux.Handle(p, guarded)
		}
	}
	return e.recoverPanics(mux)
}

// recoverPanics turns a panic in the HTTP layer into a JSON-RPC internal
// error instead of a dropped connection.
func (e *Edge) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				id := rpcerror.NewID()
				e.log.ErrorContext(r.Context(), "edge.http_panic", "error_id", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				writeRPCError(w, http.StatusInternalServerError, nil, codeInternalError, rpcerror.WithID(rpcerror.MessageInternal, id),
					map[string]string{rpcerror.MetadataErrorID: id})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// CORS for browser clients (the MCP Inspector connecting directly).
const (
	corsAllowMethods  = "GET, POST, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Accept, Mcp-Protocol-Version, Mcp-Session-Id, Mcp-Method, Mcp-Name, Last-Event-ID"
	corsExposeHeaders = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate"
)

// tokenInfoKey carries the verified TokenInfo to withTokenInfo.
type tokenInfoKey struct{}

// serveMCP checks a request in order — Host, Origin, declared body size,
// credentials, body, the scopes a tools/call needs, protocol version — then
// hands it to the handler of its protocol era.
func (e *Edge) serveMCP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		// Its answer is written when this returns: Shutdown waits for it.
		e.inflight.answers.add(1)
		defer e.inflight.answers.add(-1)
	}
	if !e.hostAllowed(r) {
		e.rejectHost(w, r)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if !e.originAllowed(origin, r) {
			e.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "origin", "origin", truncate(origin, 200))
			writeRPCError(w, http.StatusForbidden, nil, codeInvalidRequest, "Forbidden: origin "+truncate(origin, 200)+" is not allowed", nil)
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		if r.Method == http.MethodOptions {
			h.Set("Access-Control-Allow-Methods", corsAllowMethods)
			h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if r.Method == http.MethodOptions {
		w.Header().Set("Allow", corsAllowMethods)
		w.WriteHeader(http.StatusNoContent)
		return
	}

	if r.Method == http.MethodPost && r.ContentLength > e.cfg.MaxBodyBytes {
		// Refused before any of the body is read.
		writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", e.cfg.MaxBodyBytes), nil)
		return
	}

	var info any
	var caller *identity.Principal
	if e.auth != nil {
		p, ti, fail := e.auth.Authenticate(r)
		if fail != nil {
			e.refuse(w, nil, fail)
			return
		}
		info, caller = ti, p
	} else if !e.loopback(r) {
		// Development mode has no credentials: it must never be reachable
		// from another machine.
		e.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "dev_mode_not_loopback")
		writeRPCError(w, http.StatusForbidden, nil, codeUnauthorized, "Forbidden: this edge runs without authentication and serves loopback clients only", nil)
		return
	}

	var id json.RawMessage
	var method string
	var body []byte
	single := false
	if r.Method == http.MethodPost {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, e.cfg.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				writeRPCError(w, http.StatusRequestEntityTooLarge, nil, codeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit), nil)
			case errors.Is(err, os.ErrDeadlineExceeded):
				// The server's body deadline (server.Limits.BodyTimeout).
				writeRPCError(w, http.StatusRequestTimeout, nil, codeInvalidRequest, "the request body did not arrive in time", nil)
			default:
				writeRPCError(w, http.StatusBadRequest, nil, codeInvalidRequest, "the request body could not be read", nil)
			}
			return
		}
		if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
			writeRPCError(w, http.StatusBadRequest, nil, codeParseError, "Parse error: the request body is not valid JSON", nil)
			return
		}
		id, method, single = peek(body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	if caller != nil {
		if fail := e.insufficientScope(caller, method, body); fail != nil {
			e.refuse(w, id, fail)
			return
		}
	}

	handler := e.legacy
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		if !slices.Contains(e.versions, v) {
			writeRPCError(w, http.StatusBadRequest, id, codeUnsupportedVersion,
				fmt.Sprintf("unsupported protocol version %q", truncate(v, 40)),
				map[string]any{"supported": e.versions, "requested": truncate(v, 40)})
			return
		}
		if v >= ModernProtocol {
			handler = e.modern
		}
	}
	// The session era: only initialize may come without a session (a
	// stray request would otherwise open, and fail, a session of its own).
	if handler == e.legacy && r.Method == http.MethodPost && single && method != "initialize" && r.Header.Get("Mcp-Session-Id") == "" {
		writeRPCError(w, http.StatusBadRequest, id, codeInvalidRequest,
			"Bad Request: missing Mcp-Session-Id; start a session with initialize (or send MCP-Protocol-Version: "+ModernProtocol+" for the stateless protocol)", nil)
		return
	}
	if handler == e.modern && single && method == "tools/call" && e.fastCall(w, r, body, info) {
		return
	}
	if info != nil {
		r = r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, info))
		if handler == e.modern {
			handler = e.modernWithInfo
		} else {
			handler = e.legacyWithInfo
		}
	}
	rw := &rpcErrorWriter{ResponseWriter: w, id: id}
	handler.ServeHTTP(rw, r)
	rw.finish()
}

// refuse answers a request whose credentials do not do: the failure's
// status, its WWW-Authenticate challenge and a JSON-RPC error (with the
// request's id once it is known).
func (e *Edge) refuse(w http.ResponseWriter, id json.RawMessage, fail *identity.Failure) {
	w.Header().Set("WWW-Authenticate", e.auth.Challenge(fail))
	writeRPCError(w, fail.Status, id, codeUnauthorized, fail.Text(), nil)
}

// insufficientScope is the step-up challenge of a request whose token lacks
// the scope it needs (nil when it may go on); a tools/call names its tool's.
func (e *Edge) insufficientScope(p *identity.Principal, method string, body []byte) *identity.Failure {
	var t *toolcatalog.Tool
	if method == "tools/call" {
		if b := e.bindings[toolName(body)]; b != nil {
			t = b.tool
		}
	}
	return identity.InsufficientScope(p, t, e.cfg.ReadOnly)
}

// toolName is the params.name of a tools/call body ("" when it has none).
func toolName(body []byte) string {
	var m struct {
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	return m.Params.Name
}

func (e *Edge) rejectHost(w http.ResponseWriter, r *http.Request) {
	e.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "host", "host", truncate(r.Host, 200))
	writeRPCError(w, http.StatusForbidden, nil, codeInvalidRequest, "Forbidden: host "+truncate(r.Host, 200)+" is not allowed", nil)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// loopback reports whether the edge serves r on a loopback address: from
// the configured bind address when there is one, else from the connection.
func (e *Edge) loopback(r *http.Request) bool {
	if e.bindKnown {
		return e.bindLoopback
	}
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return false
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLoopbackName reports whether host (no port) names the local machine.
func isLoopbackName(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// hostPort is one Host allowlist entry; an empty port matches any port.
type hostPort struct{ host, port string }

func parseHostPort(s string) hostPort {
	s = strings.ToLower(strings.TrimSpace(s))
	if h, p, err := net.SplitHostPort(s); err == nil {
		return hostPort{strings.Trim(h, "[]"), p}
	}
	return hostPort{strings.Trim(s, "[]"), ""}
}

// hostAllowed is the DNS-rebinding guard: the Host header must name this
// edge. On loopback any loopback name is this edge; elsewhere only the
// configured hosts and the resource URI's host are.
func (e *Edge) hostAllowed(r *http.Request) bool {
	hp := parseHostPort(r.Host)
	if hp.host == "" {
		return false
	}
	if e.loopback(r) && isLoopbackName(hp.host) {
		return true
	}
	for _, a := range e.hosts {
		if a.host == hp.host && (a.port == "" || a.port == hp.port) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser page from origin may call the
// edge: a configured origin, the resource's own origin, or — on loopback —
// a page served from the local machine.
func (e *Edge) originAllowed(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
		return false
	}
	canon := u.Scheme + "://" + strings.ToLower(u.Host)
	if slices.Contains(e.origins, canon) {
		return true
	}
	return e.loopback(r) && isLoopbackName(u.Hostname())
}

// rpcErrorWriter rewrites the SDK's plain-text error responses (a bad
// Accept header, an unknown session, a malformed message) into JSON-RPC
// error bodies with the same status, so every refusal reads the same way.
type rpcErrorWriter struct {
	http.ResponseWriter
	id      json.RawMessage
	status  int // a captured error status
	buf     bytes.Buffer
	started bool
}

func (w *rpcErrorWriter) WriteHeader(code int) {
	if !w.started && code >= 400 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = code
		return
	}
	w.started = true
	w.ResponseWriter.WriteHeader(code)
}

func (w *rpcErrorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		if w.buf.Len() < 4096 {
			w.buf.Write(p)
		}
		return len(p), nil
	}
	w.started = true
	return w.ResponseWriter.Write(p)
}

func (w *rpcErrorWriter) Flush() {
	if w.status != 0 {
		return
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *rpcErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *rpcErrorWriter) finish() {
	if w.status == 0 {
		return
	}
	w.Header().Del("X-Content-Type-Options")
	writeRPCError(w.ResponseWriter, w.status, w.id, codeInvalidRequest, logging.Scrub(strings.TrimSpace(w.buf.String())), nil)
}
