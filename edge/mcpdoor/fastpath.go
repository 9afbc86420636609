package mcpdoor

import (
	"context"
	"encoding/json"
	"errors"
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
// one tools/call of a short tool, without a progress token, from a client
// that follows no extension (MCP Tasks) — by decoding it once and calling
// the same tool handler the SDK would, instead of sending it through the
// SDK's generic JSON-RPC machinery (which decodes a request several times
// and sets up a session per request). A client that can answer questions
// (elicitation, sampling, roots) is served too, and when the call asks one
// its answer is the input_required result the SDK writes. Its answer is the
// one the SDK gives, byte for byte (tested against the SDK path). Any other
// request, including every malformed or unusual one, goes to the SDK, which
// validates it and answers errors.

// fastRequest is the only request shape the fast path accepts; any other
// member makes it decline.
type fastRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *fastParams     `json:"params"`
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

// fastResult mirrors the SDK's wire form of a complete CallToolResult (its
// fields, then resultType) without its MarshalJSON method.
type fastResult struct {
	callToolResult
	ResultType string `json:"resultType"`
}

// inputRequiredResult mirrors the SDK's wire form of a CallToolResult that
// asks the client for input: its fields but the input requests, then
// resultType, then the input requests (each marshalled by its own type).
type inputRequiredResult struct {
	callToolResult
	ResultType    string          `json:"resultType"`
	InputRequests json.RawMessage `json:"inputRequests"`
}

type callToolResult mcp.CallToolResult

// marshalSessionResult is res, which asks nothing, as the SDK writes it
// to a client of a session.
func marshalSessionResult(res *mcp.CallToolResult) ([]byte, error) {
	if res.InputRequests != nil {
		// The session fast path serves no call that asks.
		return nil, errors.New("the result has input requests")
	}
	r := *res
	if r.Content == nil {
		r.Content = []mcp.Content{} // as the SDK writes it
	}
	return json.Marshal(callToolResult(r))
}

// marshalFastResult is res as the SDK writes it to a client of the
// stateless protocol.
func marshalFastResult(res *mcp.CallToolResult) ([]byte, error) {
	if res.InputRequests == nil {
		return json.Marshal(fastResult{callToolResult(*res), "complete"})
	}
	if len(res.Content) > 0 || res.StructuredContent != nil {
		// The SDK refuses such a result; the pipeline never makes one.
		return nil, errors.New("the result has both content and input requests")
	}
	irs, err := json.Marshal(res.InputRequests)
	if err != nil {
		return nil, err
	}
	return json.Marshal(inputRequiredResult{callToolResult(*res), "input_required", irs})
}

// decodeMeta decodes a request's _meta as the SDK does, when it has only
// members allowed names (ok).
func decodeMeta(raw map[string]json.RawMessage, allowed map[string]bool) (mcp.Meta, bool) {
	meta := mcp.Meta{}
	for k, v := range raw {
		if !allowed[k] {
			return nil, false
		}
		var x any
		if json.Unmarshal(v, &x) != nil {
			return nil, false
		}
		meta[k] = x
	}
	return meta, true
}

// decodeFast decodes body as the one request shape the fast path
// accepts, or returns nil: a POSTed tools/call, by its Mcp-Method header,
// whose body is one JSON object of fastRequest's members and nothing else
// (so a body that decodes is valid JSON and needs no other check).
func (d *Door) decodeFast(r *http.Request, body []byte) *fastRequest {
	if d.cfg.DisableFastPath || r.Method != http.MethodPost || r.Header.Get("Mcp-Method") != "tools/call" {
		return nil
	}
	return decodeRequest(body)
}

// postsJSONForSSE reports whether r sends JSON and accepts both JSON and
// SSE answers, as the SDK requires of a POST.
func postsJSONForSSE(r *http.Request) bool {
	return mediaType(r.Header.Get("Content-Type")) == "application/json" && acceptsJSONAndSSE(r.Header.Values("Accept"))
}

// mediaType is the media type a header's value v names, in lower case and
// without parameters ("" when v names none). The two a client of the
// stateless protocol sends are recognised without parsing them.
func mediaType(v string) string {
	switch v {
	case "application/json", "text/event-stream":
		return v
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		return ""
	}
	return mt
}

// fastCall serves req, decoded by decodeFast from r's body, when it is a
// fast-path request for a tool rc reaches, and reports whether it did;
// when it returns false nothing has been written.
func (d *Door) fastCall(w http.ResponseWriter, r *http.Request, req *fastRequest, info any, rc *reach) bool {
	if !postsJSONForSSE(r) {
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
	meta, ok := decodeMeta(p.Meta, fastMetaKeys)
	if !ok {
		return false
	}
	version, ok := meta["io.modelcontextprotocol/protocolVersion"].(string)
	if !ok || version != r.Header.Get("Mcp-Protocol-Version") {
		return false
	}
	// A client that speaks extensions (MCP Tasks) goes to the SDK, whose
	// middleware answers with the task a call becomes. One that can answer
	// input requests stays: the handler reads what it offers.
	caps, ok := meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any)
	if !ok {
		return false
	}
	if _, ok := caps["extensions"]; ok {
		return false
	}
	if _, ok := caps["tasks"]; ok {
		return false
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
	ctx := r.Context()
	if o, ok := offersOf(caps, p.Meta["io.modelcontextprotocol/clientCapabilities"], version); ok {
		ctx = context.WithValue(ctx, offersKey{}, o)
	}
	res, _ := t.handler(ctx, call)
	if res == nil {
		// A protocol error: the SDK answers it (the handler refuses such a
		// call before it reaches a service, or after a service did
		// nothing: see clientGapError).
		return false
	}
	d.writeFastAnswer(ctx, w, req.ID, p.Name, res, true)
	return true
}

// writeFastAnswer writes res, the result of the call of tool name with the
// JSON-RPC id id, as the SDK writes it in an SSE answer: to a client of the
// stateless protocol (modern) with the server's info and the result's type,
// to one of a session without. The id is written back as it came
// (httpguard.PlainID), like the SDK does.
func (d *Door) writeFastAnswer(ctx context.Context, w http.ResponseWriter, id json.RawMessage, name string, res *mcp.CallToolResult, modern bool) {
	bp := answers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledAnswer {
			answers.Put(bp)
		}
	}()
	buf := append((*bp)[:0], "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"...)
	buf = append(buf, id...)
	buf = append(buf, `,"result":`...)
	info := d.serverInfo
	if !modern {
		info = nil
	}
	buf, written := appendPlainResult(buf, res, info)
	if !written {
		var result []byte
		var err error
		if modern {
			if res.Meta == nil {
				res.Meta = mcp.Meta{}
			}
			res.Meta["io.modelcontextprotocol/serverInfo"] = d.impl
			result, err = marshalFastResult(res)
		} else {
			result, err = marshalSessionResult(res)
		}
		if err != nil {
			// The call ran: answer that its result could not be sent,
			// rather than run it again on the SDK's path.
			d.log.ErrorContext(ctx, "mcp.result_not_encoded", "tool", name, "error", err.Error())
			buf = append(buf[:0], "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":"...)
			buf = append(buf, id...)
			buf = append(buf, `,"error":{"code":-32603,"message":"the tool's result could not be encoded"}`...)
		} else {
			buf = append(buf, result...)
		}
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
		for part := range strings.SplitSeq(v, ",") {
			switch mediaType(strings.TrimSpace(part)) {
			case "application/json":
				js = true
			case "text/event-stream":
				sse = true
			}
		}
	}
	return js && sse
}
