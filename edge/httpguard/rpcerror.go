package httpguard

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"github.com/toolmesh/toolmesh/internal/rpcerror"
)

// JSON-RPC error codes the edge's listeners write themselves.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeInternalError  = -32603
	CodeUnauthorized   = -32001
)

// rpcErrorResponse is a JSON-RPC error response.
type rpcErrorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   rpcErrorBody    `json:"error"`
}

type rpcErrorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// WriteRPCError answers with status and a JSON-RPC error body: every
// refusal of the edge's HTTP layer is one a JSON-RPC client can read.
func WriteRPCError(w http.ResponseWriter, status int, id json.RawMessage, code int, msg string, data any) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, err := json.Marshal(rpcErrorResponse{JSONRPC: "2.0", ID: id, Error: rpcErrorBody{Code: code, Message: msg, Data: data}})
	if err != nil {
		b = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// Peek returns the id and method of a single JSON-RPC message body, for
// decisions and error responses made before the body is read in full (a
// nil id when there is none or it is not a valid id; single: false when
// the body is not one object).
func Peek(body []byte) (id json.RawMessage, method string, single bool) {
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
	return ReplyID(m.ID), m.Method, true
}

// ReplyID is the id a request's error answer repeats: raw when it is a
// valid JSON-RPC id (a string or a number), else nil.
func ReplyID(raw json.RawMessage) json.RawMessage {
	if len(raw) > 0 {
		switch raw[0] {
		case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return raw
		}
	}
	return nil
}

// PlainID reports whether id is a JSON-RPC request id that can be written
// back byte for byte, as the MCP SDK does: an integer, or a string of
// printable ASCII without escapes.
func PlainID(id json.RawMessage) bool {
	if len(id) >= 2 && id[0] == '"' && id[len(id)-1] == '"' {
		for _, c := range id[1 : len(id)-1] {
			if c < 0x20 || c >= 0x7f || c == '\\' || c == '"' {
				return false
			}
		}
		return true
	}
	digits := id
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// RecoverPanics turns a panic in the HTTP layer into a JSON-RPC internal
// error instead of a dropped connection.
func RecoverPanics(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				id := rpcerror.NewID()
				log.ErrorContext(r.Context(), "edge.http_panic", "error_id", id, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
				WriteRPCError(w, http.StatusInternalServerError, nil, CodeInternalError, rpcerror.WithID(rpcerror.MessageInternal, id),
					map[string]string{rpcerror.MetadataErrorID: id})
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// Healthz answers a readiness probe.
func Healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok\n"))
}
