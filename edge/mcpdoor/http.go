package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/identity"
	"github.com/toolmesh/toolmesh/edge/port"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// codeUnsupportedVersion answers a protocol version the edge does not
// speak.
const codeUnsupportedVersion = -32022

// CORS for browser clients (the MCP Inspector connecting directly).
const (
	corsAllowMethods  = "GET, POST, DELETE, OPTIONS"
	corsAllowHeaders  = "Authorization, Content-Type, Accept, Mcp-Protocol-Version, Mcp-Session-Id, Mcp-Method, Mcp-Name, Last-Event-ID, " + HeaderToolsets
	corsExposeHeaders = "Mcp-Session-Id, Mcp-Protocol-Version, WWW-Authenticate"
)

// tokenInfoKey carries the verified TokenInfo to withTokenInfo.
type tokenInfoKey struct{}

// Handler serves /mcp.
func (d *Door) Handler() http.Handler { return http.HandlerFunc(d.serveMCP) }

// serveMCP checks a request in order — Host, Origin, declared body size,
// credentials, body, toolset selection, the scopes a tools/call needs,
// protocol version — then hands it to the handler of its protocol era.
func (d *Door) serveMCP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		// Its answer is written when this returns: the edge's shutdown
		// waits for it.
		d.cfg.Answers.Add(1)
		defer d.cfg.Answers.Add(-1)
	}
	g := d.cfg.Guard
	if !g.HostAllowed(r) {
		g.RejectHost(w, r)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		if !g.OriginAllowed(origin, r) {
			g.RejectOrigin(w, r, origin)
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

	maxBody := d.cfg.MaxBodyBytes
	if r.Method == http.MethodPost && r.ContentLength > maxBody {
		// Refused before any of the body is read.
		httpguard.WriteRPCError(w, http.StatusRequestEntityTooLarge, nil, httpguard.CodeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", maxBody), nil)
		return
	}

	var info any
	var caller *identity.Principal
	if d.cfg.Auth != nil {
		p, ti, fail := d.cfg.Auth.Authenticate(r)
		if fail != nil {
			d.refuse(w, nil, fail)
			return
		}
		info, caller = ti, p
	} else if !g.Loopback(r) {
		// Development mode has no credentials: it must never be reachable
		// from another machine.
		d.log.WarnContext(r.Context(), "edge.request_rejected", "reason", "dev_mode_not_loopback")
		httpguard.WriteRPCError(w, http.StatusForbidden, nil, httpguard.CodeUnauthorized, "Forbidden: this edge runs without authentication and serves loopback clients only", nil)
		return
	}

	var id json.RawMessage
	var method string
	var body []byte
	var fast *fastRequest
	single := false
	if r.Method == http.MethodPost {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				httpguard.WriteRPCError(w, http.StatusRequestEntityTooLarge, nil, httpguard.CodeInvalidRequest, fmt.Sprintf("the request body exceeds %d bytes", mbe.Limit), nil)
			case errors.Is(err, os.ErrDeadlineExceeded):
				// The server's body deadline (server.Limits.BodyTimeout).
				httpguard.WriteRPCError(w, http.StatusRequestTimeout, nil, httpguard.CodeInvalidRequest, "the request body did not arrive in time", nil)
			default:
				httpguard.WriteRPCError(w, http.StatusBadRequest, nil, httpguard.CodeInvalidRequest, "the request body could not be read", nil)
			}
			return
		}
		// A request the fast path can serve is decoded once, and so known
		// to be one valid JSON object; any other is checked and peeked at.
		if fast = d.decodeFast(r, body); fast != nil {
			id, method, single = httpguard.ReplyID(fast.ID), fast.Method, true
		} else {
			if len(bytes.TrimSpace(body)) == 0 || !json.Valid(body) {
				httpguard.WriteRPCError(w, http.StatusBadRequest, nil, httpguard.CodeParseError, "Parse error: the request body is not valid JSON", nil)
				return
			}
			id, method, single = httpguard.Peek(body)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
	}
	sel, fromPath, err := d.resolve.requestSelection(r)
	if err != nil {
		var data any
		if se, ok := err.(*selectionError); ok {
			data = se.data(d.toolsets)
		}
		httpguard.WriteRPCError(w, http.StatusBadRequest, id, httpguard.CodeInvalidRequest, "Bad Request: "+err.Error(), data)
		return
	}
	if sel == nil {
		sel = d.toolsets.fallback
	}
	ctx := context.WithValue(r.Context(), selectionKey{}, sel)
	if !g.Loopback(r) {
		ctx = context.WithValue(ctx, remoteClientKey{}, true)
	}
	if fromPath {
		ctx = context.WithValue(ctx, pathSelectionKey{}, sel)
	}
	r = r.WithContext(ctx)
	rc := &reach{sel: sel}
	if rc.claim, err = d.resolve.claimOf(caller); err != nil {
		// The operator's narrowing names what this edge lacks: refused
		// rather than widened or emptied.
		httpguard.WriteRPCError(w, http.StatusForbidden, id, httpguard.CodeUnauthorized, "Forbidden: "+err.Error(), nil)
		return
	}
	if caller != nil {
		if fail := d.calls.insufficientScope(caller, rc, method, body); fail != nil {
			d.refuse(w, id, fail)
			return
		}
	}

	handler := d.legacy
	if v := r.Header.Get("Mcp-Protocol-Version"); v != "" {
		if !slices.Contains(ProtocolVersions, v) {
			httpguard.WriteRPCError(w, http.StatusBadRequest, id, codeUnsupportedVersion,
				fmt.Sprintf("unsupported protocol version %q", httpguard.Truncate(v, 40)),
				map[string]any{"supported": ProtocolVersions, "requested": httpguard.Truncate(v, 40)})
			return
		}
		if v >= ModernProtocol {
			handler = d.modern
		}
	}
	// The session era: only initialize may come without a session (a
	// stray request would otherwise open, and fail, a session of its own).
	if handler == d.legacy && r.Method == http.MethodPost && single && method != "initialize" && r.Header.Get("Mcp-Session-Id") == "" {
		httpguard.WriteRPCError(w, http.StatusBadRequest, id, httpguard.CodeInvalidRequest,
			"Bad Request: missing Mcp-Session-Id; start a session with initialize (or send MCP-Protocol-Version: "+ModernProtocol+" for the stateless protocol)", nil)
		return
	}
	if handler == d.modern && single && method == "subscriptions/listen" && d.tasks != nil {
		if lp := taskListen(body); lp != nil {
			p := caller
			if p == nil {
				p = d.cfg.Dev
			}
			d.taskf.listenTasks(w, r, id, lp, p)
			return
		}
	}
	if handler == d.modern && single && d.tasks != nil && taskNamed(method) {
		// The SDK checks Mcp-Name for the methods it knows; a task method
		// names its task (MCP Tasks: Mcp-Name is params.taskId).
		if name, ok := r.Header[http.CanonicalHeaderKey("Mcp-Name")]; ok {
			if taskID := taskIDOf(body); len(name) != 1 || strings.TrimSpace(name[0]) != taskID {
				httpguard.WriteRPCError(w, http.StatusBadRequest, id, codeHeaderMismatch,
					fmt.Sprintf("Mcp-Name header does not match params.taskId %q", httpguard.Truncate(taskID, 80)), nil)
				return
			}
		}
	}
	if handler == d.modern && fast != nil && d.fastCall(w, r, fast, info, rc) {
		return
	}
	legacy := handler == d.legacy
	if legacy && r.Method == http.MethodDelete {
		d.ending(r, info)
	}
	if legacy && r.Method == http.MethodPost && single {
		switch method {
		case "tools/call":
			if d.sessionCall(w, r, body, info, rc) {
				return
			}
		case "initialize":
			// The session it opens may be served directly (sessionfast.go).
			r = r.WithContext(context.WithValue(r.Context(), streamableSessionKey{}, true))
		}
	}
	if legacy && single && method == "tools/call" && d.tasks != nil {
		if b, ok := coreTaskInMeta(body); ok {
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.ContentLength = int64(len(b))
		}
	}
	if info != nil {
		r = r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, info))
		if handler == d.modern {
			handler = d.modernWithInfo
		} else {
			handler = d.legacyWithInfo
		}
	}
	rw := &rpcErrorWriter{ResponseWriter: w, id: id}
	handler.ServeHTTP(rw, r)
	rw.finish()
	if legacy && r.Method == http.MethodPost {
		// The SDK has reset the session's idle clock.
		if st := d.states.byIDOf(r.Header.Get("Mcp-Session-Id")); st != nil && st.direct != nil {
			st.direct.touch()
		}
	}
}

// coreTaskInMeta moves the params.task of a session's task-augmented
// tools/call (2025-11-25) into its _meta (metaCoreTask), where the SDK,
// which drops params it does not know, lets the task middleware see it; ok
// is false for a call without one.
func coreTaskInMeta(body []byte) ([]byte, bool) {
	var msg map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil {
		return nil, false
	}
	var params map[string]json.RawMessage
	if json.Unmarshal(msg["params"], &params) != nil {
		return nil, false
	}
	task, ok := params["task"]
	if !ok || !bytes.HasPrefix(bytes.TrimSpace(task), []byte("{")) {
		return nil, false
	}
	meta := map[string]json.RawMessage{}
	if m, ok := params["_meta"]; ok && json.Unmarshal(m, &meta) != nil {
		return nil, false
	}
	meta[metaCoreTask] = task
	var err error
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return nil, false
	}
	if msg["params"], err = json.Marshal(params); err != nil {
		return nil, false
	}
	b, err := json.Marshal(msg)
	return b, err == nil
}

// ModernProtocol is the first MCP protocol version served statelessly.
const ModernProtocol = port.ModernProtocol

// refuse answers a request whose credentials do not do: the failure's
// status, its WWW-Authenticate challenge and a JSON-RPC error (with the
// request's id once it is known).
func (d *Door) refuse(w http.ResponseWriter, id json.RawMessage, fail *identity.Failure) {
	w.Header().Set("WWW-Authenticate", d.cfg.Auth.Challenge(fail))
	httpguard.WriteRPCError(w, fail.Status, id, httpguard.CodeUnauthorized, fail.Text(), nil)
}

// insufficientScope is the step-up challenge of a request whose token lacks
// the scope it needs (nil when it may go on); a tools/call names its
// tool's, unless its selection leaves the tool out (no scope would help).
func (tc *toolFeature) insufficientScope(p *identity.Principal, r *reach, method string, body []byte) *identity.Failure {
	var t *toolcatalog.Tool
	if method == "tools/call" {
		if dt := tc.tools[toolName(body)]; dt != nil && r.has(dt.catalog.Name) {
			t = dt.catalog
		}
	}
	return identity.InsufficientScope(p, t, tc.pipeline.ReadOnly())
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
	httpguard.WriteRPCError(w.ResponseWriter, w.status, w.id, httpguard.CodeInvalidRequest, logging.Scrub(strings.TrimSpace(w.buf.String())), nil)
}
