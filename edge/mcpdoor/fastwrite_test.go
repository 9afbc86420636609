package mcpdoor

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
)

// TestPlainResultIsWhatEncodingJSONWrites: for the results the fast paths
// make, appendPlainResult writes encoding/json's bytes without it, in the
// stateless protocol's form and in a session's; for any other it declines.
func TestPlainResultIsWhatEncodingJSONWrites(t *testing.T) {
	t.Parallel()
	impl := &mcp.Implementation{Name: "toolmesh", Title: "toolmesh", Version: "dev"}
	serverInfo, err := json.Marshal(impl)
	if err != nil {
		t.Fatal(err)
	}
	marshal := func(res *mcp.CallToolResult) string {
		res.Meta = mcp.Meta{"io.modelcontextprotocol/serverInfo": impl}
		b, err := json.Marshal(fastResult{callToolResult(*res), "complete"})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for name, env := range map[string]*toolcall.Envelope{
		"ok":         toolcall.OK(json.RawMessage(`{"id":"tsk_1","note":"a \"quoted\" \\ back\\slash, <b> & é \u2028","n":[1,2]}`), nil),
		"page":       toolcall.OK(json.RawMessage(`{"items":[]}`), &toolcall.Pagination{Limit: 50, Total: 3}),
		"error":      toolcall.Fail("tasks_get", toolcall.CodeNotFound, `task "x" not found`),
		"violations": toolcall.Invalid("tasks_create", []boundary.Violation{{Field: "description", Rule: "string.min_len", Message: "value length must be at least 1 characters"}}),
	} {
		t.Run(name, func(t *testing.T) {
			got, ok := appendPlainResult(nil, result(env), serverInfo)
			if !ok {
				t.Fatalf("declined the result of %+v", env)
			}
			if diff := cmp.Diff(marshal(result(env)), string(got)); diff != "" {
				t.Errorf("(-encoding/json +appendPlainResult):\n%s", diff)
			}
			got, ok = appendPlainResult(nil, result(env), nil)
			if !ok {
				t.Fatalf("declined the session result of %+v", env)
			}
			want, err := marshalSessionResult(result(env))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("session (-encoding/json +appendPlainResult):\n%s", diff)
			}
		})
	}
	for name, res := range map[string]*mcp.CallToolResult{
		"two contents":     {Content: []mcp.Content{&mcp.TextContent{Text: "{}"}, &mcp.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage("{}")},
		"other structured": {Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: map[string]any{}},
		"text differs":     {Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage(`{"a":1}`)},
		"not compact":      {Content: []mcp.Content{&mcp.TextContent{Text: `{"a": 1}`}}, StructuredContent: json.RawMessage(`{"a": 1}`)},
		"meta":             {Meta: mcp.Meta{"k": "v"}, Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage("{}")},
		"line separator":   {Content: []mcp.Content{&mcp.TextContent{Text: "\"\u2028\""}}, StructuredContent: json.RawMessage("\"\u2028\"")},
		"invalid UTF-8":    {Content: []mcp.Content{&mcp.TextContent{Text: "\"\xff\""}}, StructuredContent: json.RawMessage("\"\xff\"")},
		"request state":    {Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: json.RawMessage("{}"), RequestState: "s"},
	} {
		if _, ok := appendPlainResult(nil, res, serverInfo); ok {
			t.Errorf("%s: appendPlainResult took a result it cannot write", name)
		}
		if _, ok := appendPlainResult(nil, res, nil); ok {
			t.Errorf("%s: appendPlainResult took a session result it cannot write", name)
		}
	}
}
