package mcpdoor

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// appendPlainResult appends the JSON that encoding/json writes for a
// fast-path result, when the result is an envelope as result() makes
// it — one text content and structuredContent that are both the envelope's
// JSON, no _meta — without marshalling it through reflection (which
// re-encodes the envelope twice). With serverInfo (a client of the
// stateless protocol) the result carries it as its only _meta, and its
// resultType; without (a client of a session) neither. For any other
// result it reports false and the caller marshals it; the bytes are the same
// either way (TestFastPathAnswersAsTheSDKDoes,
// TestSessionFastPathAnswersAsTheSDKDoes).
func appendPlainResult(buf []byte, res *mcp.CallToolResult, serverInfo []byte) ([]byte, bool) {
	if len(res.Meta) != 0 || len(res.Content) != 1 || res.InputRequests != nil || res.RequestState != "" {
		return buf, false
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok || text.Meta != nil || text.Annotations != nil {
		return buf, false
	}
	// result() sets both from one json.Marshal: compact, HTML-escaped.
	raw, ok := res.StructuredContent.(json.RawMessage)
	if !ok || string(raw) != text.Text || !plainJSON(raw) {
		return buf, false
	}
	if serverInfo != nil {
		buf = append(buf, `{"_meta":{"io.modelcontextprotocol/serverInfo":`...)
		buf = append(buf, serverInfo...)
		buf = append(buf, `},"content":[{"type":"text","text":"`...)
	} else {
		buf = append(buf, `{"content":[{"type":"text","text":"`...)
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c == '"' || c == '\\' {
			buf = append(buf, '\\')
		}
		buf = append(buf, raw[i])
	}
	buf = append(buf, `"}],"structuredContent":`...)
	buf = append(buf, raw...)
	if res.IsError {
		buf = append(buf, `,"isError":true`...)
	}
	if serverInfo != nil {
		buf = append(buf, `,"resultType":"complete"`...)
	}
	buf = append(buf, '}')
	return buf, true
}

// plainJSON reports whether b is JSON that encoding/json copies unchanged
// into its output: compact (no space outside strings), valid UTF-8 without
// control characters, <, >, &, U+2028 or U+2029 (which it escapes), inside
// strings too. Such JSON is also quoted by escaping only " and \.
func plainJSON(b []byte) bool {
	if len(b) == 0 || !utf8.Valid(b) || bytes.Contains(b, lineSeparator) || bytes.Contains(b, paragraphSeparator) {
		return false
	}
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case c < 0x20 || c == '<' || c == '>' || c == '&':
			return false
		case escaped:
			escaped = false
		case c == '\\':
			escaped = inString
		case c == '"':
			inString = !inString
		case c == ' ' && !inString:
			return false
		}
	}
	return true
}

var (
	lineSeparator      = []byte("\u2028")
	paragraphSeparator = []byte("\u2029")
)
