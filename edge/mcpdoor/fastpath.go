package mcpdoor

import (
	"bytes"
	"context"
	"encoding/json"
	"mime"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge/httpguard"
	"github.com/toolmesh/toolmesh/edge/port"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// The fast path serves the most common request of the stateless protocol —
// one tools/call of a short tool from a client that declares nothing the
// call could use (no progress token, no log level, no elicitation, no
// extensions) — by decoding it once and calling the same tool handler the
// SDK would, instead of sending it through the SDK's generic JSON-RPC
// machinery (which decodes a request several times and sets up a session
// per request). Its answer is the one the SDK gives, byte for byte (tested
// against the SDK path). Any other request, including every malformed or
// unusual one, goes to the SDK, which validates it and answers errors.

// fastRequest is the only request shape the fast path accepts; any other
// member makes it decline.
type fastRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string                     `json:"name"`
		Arguments json.RawMessage            `json:"arguments"`
		Meta      map[string]json.RawMessage `json:"_meta"`
	} `json:"params"`
}

// fastMetaKeys are the _meta members a fast-path request may carry.
var fastMetaKeys = map[string]bool{
	"io.modelcontextprotocol/protocolVersion":    true,
	"io.modelcontextprotocol/clientCapabilities": true,
	"io.modelcontextprotocol/clientInfo":         true,
	port.MetaIdempotencyKey:                      true,
	// Trace context (see telemetry.go): the call's span continues it.
	"traceparent": true,
	"tracestate":  true,
}

// fastResult mirrors the SDK's wire form of a CallToolResult (its fields,
// then resultType) without its MarshalJSON method.
type fastResult struct {
	callToolResult
	ResultType string `json:"resultType"`
}

type callToolResult mcp.CallToolResult

// decodeFast decodes body as the one request shape the fast path
// accepts, or returns nil: a POSTed tools/call, by its Mcp-Method header,
// whose body is one JSON object of fastRequest's members and nothing else
// (so a body that decodes is valid JSON and needs no other check).
func (d *Door) decodeFast(r *http.Request, body []byte) *fastRequest {
	if d.cfg.DisableFastPath || r.Method != http.MethodPost || r.Header.Get("Mcp-Method") != "tools/call" {
		return nil
	}
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		return nil
	}
	req := &fastRequest{}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if dec.Decode(req) != nil || len(bytes.TrimSpace(body[dec.InputOffset():])) != 0 {
		return nil
	}
	return req
}

// fastCall serves req, decoded by decodeFast from r's body, when it is a
// fast-path request for a tool rc reaches, and reports whether it did;
// when it returns false nothing has been written.
func (d *Door) fastCall(w http.ResponseWriter, r *http.Request, req *fastRequest, info any, rc *reach) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if !acceptsJSONAndSSE(r.Header.Values("Accept")) {
		return false
	}
	p := req.Params
	if req.JSONRPC != "2.0" || req.Method != "tools/call" || p == nil || p.Name == "" || p.Name != r.Header.Get("Mcp-Name") || !httpguard.PlainID(req.ID) {
		return false
	}
	t, ok := d.tools[p.Name]
	// A long-running tool, and one whose calls must be tasks (refused to
	// a client that does not follow them), take the full path.
	if !ok || t.catalog.LongRunning || t.catalog.TaskSupport == toolv1.TaskSupport_TASK_SUPPORT_REQUIRED || !rc.has(p.Name) {
		return false
	}
	var version string
	if json.Unmarshal(p.Meta["io.modelcontextprotocol/protocolVersion"], &version) != nil || version != r.Header.Get("Mcp-Protocol-Version") {
		return false
	}
	meta := mcp.Meta{}
	for k, v := range p.Meta {
		if !fastMetaKeys[k] {
			return false
		}
		var x any
		if json.Unmarshal(v, &x) != nil {
			return false
		}
		meta[k] = x
	}
	// The client may use nothing beyond plain calls: a client that can
	// answer input requests or speaks extensions (MCP Tasks) goes to the
	// SDK.
	caps, ok := meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	if !ok {
		return false
	}
	for k := range caps {
		if k == "elicitation" || k == "sampling" || k == "roots" || k == "extensions" || k == "tasks" {
			return false
		}
	}
	if ci, present := meta["io.modelcontextprotocol/clientInfo"]; present {
		if _, isObject := ci.(map[string]any); !isObject {
			return false
		}
	}
	extra := &mcp.RequestExtra{Header: r.Header}
	if ti, ok := info.(*auth.TokenInfo); ok {
		extra.TokenInfo = ti
	}
	call := &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Meta: meta, Name: p.Name, Arguments: p.Arguments},
		Extra:  extra,
	}
	res, _ := t.handler(context.WithValue(r.Context(), plainClientKey{}, true), call)
	if res == nil || res.InputRequests != nil {
		// Cannot happen for a client that cannot elicit; never answer
		// something the SDK would not.
		return false
	}
	// The id is written back as it came (httpguard.PlainID), like the SDK does.
	bp := answers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledAnswer {
			answers.Put(bp)
		}
	}()
	buf := append((*bp)[:0], "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"...)
	buf = append(buf, req.ID...)
	buf = append(buf, `,"result":`...)
	buf, plain := appendPlainResult(buf, res, d.serverInfo)
	if !plain {
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		}
		res.Meta["io.modelcontextprotocol/serverInfo"] = d.impl
		result, err := json.Marshal(fastResult{callToolResult(*res), "complete"})
		if err != nil {
			return false
		}
		buf = append(buf, result...)
	}
	buf = append(buf, '}')
	buf = append(buf, "\n\n"...)
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Connection", "keep-alive")
	h.Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
	*bp = buf
	return true
}

// answers are the buffers fast-path answers are written in (net/http
// copies an answer out of its buffer on Write); an answer larger than
// maxPooledAnswer is left to the collector.
var answers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const maxPooledAnswer = 64 << 10

// acceptsJSONAndSSE reports whether the Accept headers name both
// application/json and text/event-stream, as the stateless protocol needs.
func acceptsJSONAndSSE(values []string) bool {
	var js, sse bool
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			js = js || mt == "application/json"
			sse = sse || mt == "text/event-stream"
		}
	}
	return js && sse
}
