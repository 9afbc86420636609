//lint:file-ignore SA1019 the logging feature (deprecated from 2026-07-28 on) is part of what these tests check

package mcpdoor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
	"github.com/toolmesh/toolmesh/internal/logging"
	"github.com/toolmesh/toolmesh/internal/logging/logtest"
	"github.com/toolmesh/toolmesh/internal/testsupport/conformancesvc"
	"github.com/toolmesh/toolmesh/internal/testsupport/servertest"
	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1/conformancev1connect"
)

// The content blocks a tool answers (toolmesh.tool.v1 Content) and the
// events a streaming tool reports (CallEvent), through the edge, against the
// conformance suite's fixtures (internal/testsupport/conformancesvc): results, resource
// reads and prompts carry the blocks; progress and log messages reach the
// clients that asked for them, before the result.

// newContentEdge serves an edge whose only backend is the conformance
// fixtures' service.
func newContentEdge(t *testing.T) *edgetest.Fixture {
	t.Helper()
	svc := servertest.Start(t, conformancesvc.New().Server())
	f := &edgetest.Fixture{Svc: svc, Logs: &logtest.Buffer{}}
	e, err := edge.New(edge.Config{
		Contracts:   []protoreflect.ServiceDescriptor{conformancev1.File_toolmesh_conformance_v1_conformance_proto.Services().ByName("ConformanceService")},
		Services:    map[string]string{conformancev1connect.ConformanceServiceName: svc.URL},
		HTTPClient:  svc.Client(),
		Mesh:        servertest.MeshSigner(),
		CallTimeout: 5 * time.Second,
	}, logging.New(f.Logs, logging.ParseLevel("debug")))
	if err != nil {
		t.Fatal(err)
	}
	f.Edge = e
	f.HTTP = httptest.NewServer(e.Handler())
	t.Cleanup(f.HTTP.Close)
	f.URL = f.HTTP.URL + "/mcp"
	return f
}

// eras are the protocol versions the content tests run at: the stateless
// protocol and the session era.
var eras = []string{edge.ModernProtocol, "2025-11-25"}

func callTool(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("tools/call %s: %v", params.Name, err)
	}
	return res
}

// TestToolResultsCarryContentBlocks: a tool's content blocks come first in
// its result, as MCP content of their kind, and the envelope, last, holds
// the rest of its data without them.
func TestToolResultsCarryContentBlocks(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	for _, v := range eras {
		t.Run(v, func(t *testing.T) {
			cs := f.Connect(t, v, "", nil)
			res := callTool(t, cs, &mcp.CallToolParams{Name: "test_multiple_content_types", Arguments: map[string]any{}})
			if res.IsError || len(res.Content) != 4 {
				t.Fatalf("result: isError %v, %d blocks, want 3 blocks and the envelope: %+v", res.IsError, len(res.Content), res.Content)
			}
			if tc, ok := res.Content[0].(*mcp.TextContent); !ok || tc.Text != "Multiple content types test:" {
				t.Errorf("block 0 = %#v, want the text", res.Content[0])
			}
			if ic, ok := res.Content[1].(*mcp.ImageContent); !ok || ic.MIMEType != "image/png" || !bytes.Equal(ic.Data, conformancesvc.PNG) {
				t.Errorf("block 1 = %#v, want the PNG", res.Content[1])
			}
			er, ok := res.Content[2].(*mcp.EmbeddedResource)
			if !ok || er.Resource.URI != "test://mixed-content-resource" || er.Resource.MIMEType != "application/json" || !edgetest.JsonEqual(er.Resource.Text, `{"test":"data","value":123}`) {
				t.Errorf("block 2 = %#v, want the embedded JSON resource", res.Content[2])
			}
			env, ok := res.Content[3].(*mcp.TextContent)
			if !ok || !edgetest.JsonEqual(env.Text, `{"status":"ok","data":{}}`) {
				t.Errorf("block 3 = %#v, want the envelope without the blocks in its data", res.Content[3])
			}
			if b, _ := json.Marshal(res.StructuredContent); !edgetest.JsonEqual(string(b), `{"status":"ok","data":{}}`) {
				t.Errorf("structuredContent = %s, want the envelope without the blocks", b)
			}

			res = callTool(t, cs, &mcp.CallToolParams{Name: "test_audio_content", Arguments: map[string]any{}})
			if ac, ok := res.Content[0].(*mcp.AudioContent); !ok || ac.MIMEType != "audio/wav" || !bytes.Equal(ac.Data, conformancesvc.WAV) {
				t.Errorf("audio block = %#v, want the WAV", res.Content[0])
			}
			// An error has no blocks: the envelope says what went wrong.
			res = callTool(t, cs, &mcp.CallToolParams{Name: "test_error_handling", Arguments: map[string]any{}})
			if tc, ok := res.Content[0].(*mcp.TextContent); !res.IsError || len(res.Content) != 1 || !ok || !strings.Contains(tc.Text, conformancesvc.ErrorText) {
				t.Errorf("error result = %v %+v, want one block, the error envelope with the service's message", res.IsError, res.Content)
			}
		})
	}
}

// TestContentToolsDescribeDataWithoutBlocks: the output schema of a tool
// that answers blocks, or reports events, describes the data the envelope
// holds, without them.
func TestContentToolsDescribeDataWithoutBlocks(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	for _, name := range []string{"test_image_content", "test_tool_with_progress"} {
		tool, ok := f.Edge.Registry().Lookup(name)
		if !ok {
			t.Fatalf("no tool %s", name)
		}
		var schema struct {
			OneOf []struct {
				Properties struct {
					Data struct {
						Properties map[string]any `json:"properties"`
					} `json:"data"`
				} `json:"properties"`
			} `json:"oneOf"`
		}
		if err := json.Unmarshal(tool.OutputSchema, &schema); err != nil || len(schema.OneOf) == 0 {
			t.Fatalf("%s: output schema %s: %v", name, tool.OutputSchema, err)
		}
		for _, field := range []string{"content", "event"} {
			if _, ok := schema.OneOf[0].Properties.Data.Properties[field]; ok {
				t.Errorf("%s: the data schema describes %s: %s", name, field, tool.OutputSchema)
			}
		}
	}
}

// TestResourcesReadAsContentBlocks: a resource whose tool answers content
// blocks reads as them — an embedded resource as itself, an image as a
// blob of its type — and a template's variable reaches the tool.
func TestResourcesReadAsContentBlocks(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	for _, v := range eras {
		t.Run(v, func(t *testing.T) {
			cs := f.Connect(t, v, "", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			read := func(uri string) *mcp.ResourceContents {
				t.Helper()
				res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
				if err != nil || len(res.Contents) != 1 {
					t.Fatalf("read %s: %+v, %v", uri, res, err)
				}
				return res.Contents[0]
			}
			if c := read("test://static-text"); c.URI != "test://static-text" || c.MIMEType != "text/plain" || c.Text != conformancesvc.StaticText {
				t.Errorf("static text = %+v", c)
			}
			if c := read("test://static-binary"); c.URI != "test://static-binary" || c.MIMEType != "image/png" || !bytes.Equal(c.Blob, conformancesvc.PNG) {
				t.Errorf("static binary = %+v", c)
			}
			if c := read("test://template/42/data"); c.MIMEType != "application/json" || !strings.Contains(c.Text, `"id":"42"`) {
				t.Errorf("template item 42 = %+v", c)
			}
			list, err := cs.ListResources(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			var uris []string
			for _, r := range list.Resources {
				uris = append(uris, r.URI)
			}
			for _, want := range []string{"test://static-text", "test://static-binary", "test://watched-resource", "test://template/123/data"} {
				if !slices.Contains(uris, want) {
					t.Errorf("resources/list = %v, want %s in it", uris, want)
				}
			}
		})
	}
}

// TestPromptsEmbedContentBlocks: a prompt that embeds content hands the
// model the instructions, then each block its tool answers, called with the
// arguments given in their fields.
func TestPromptsEmbedContentBlocks(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	for _, v := range eras {
		t.Run(v, func(t *testing.T) {
			cs := f.Connect(t, v, "", nil)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_prompt_with_embedded_resource",
				Arguments: map[string]string{"resourceUri": "test://chosen-by-the-user"}})
			if err != nil || len(res.Messages) != 2 {
				t.Fatalf("prompts/get: %+v, %v", res, err)
			}
			if tc, ok := res.Messages[0].Content.(*mcp.TextContent); !ok || tc.Text != "Please process the embedded resource below." {
				t.Errorf("message 0 = %#v, want the instructions", res.Messages[0].Content)
			}
			if er, ok := res.Messages[1].Content.(*mcp.EmbeddedResource); !ok || er.Resource.URI != "test://chosen-by-the-user" || er.Resource.Text != conformancesvc.EmbeddedText {
				t.Errorf("message 1 = %#v, want the resource the argument named", res.Messages[1].Content)
			}
			res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_prompt_with_image"})
			if err != nil || len(res.Messages) != 2 {
				t.Fatalf("prompts/get: %+v, %v", res, err)
			}
			if ic, ok := res.Messages[1].Content.(*mcp.ImageContent); !ok || !bytes.Equal(ic.Data, conformancesvc.PNG) {
				t.Errorf("message 1 = %#v, want the image", res.Messages[1].Content)
			}
		})
	}
}

// notes collects the notifications a client receives.
type notes struct {
	mu       sync.Mutex
	progress []*mcp.ProgressNotificationParams
	logs     []*mcp.LoggingMessageParams
}

func (n *notes) options() *mcp.ClientOptions {
	return &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			n.mu.Lock()
			n.progress = append(n.progress, r.Params)
			n.mu.Unlock()
		},
		LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) {
			n.mu.Lock()
			n.logs = append(n.logs, r.Params)
			n.mu.Unlock()
		},
	}
}

func (n *notes) taken() ([]*mcp.ProgressNotificationParams, []*mcp.LoggingMessageParams) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p, l := n.progress, n.logs
	n.progress, n.logs = nil, nil
	return p, l
}

// postFrames posts one stateless (2026-07-28) request to the edge at url
// and returns the JSON-RPC messages of its answer, in the order they came:
// the notifications the call sent on its stream, then its response.
func postFrames(t *testing.T, url, method string, params map[string]any, meta map[string]any) []map[string]any {
	t.Helper()
	m := map[string]any{
		"io.modelcontextprotocol/protocolVersion":    edge.ModernProtocol,
		"io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}
	for k, v := range meta {
		m[k] = v
	}
	params["_meta"] = m
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.RequestURI = ""
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", edge.ModernProtocol)
	req.Header.Set("Mcp-Method", method)
	if name, ok := params["name"].(string); ok {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var frames []map[string]any
	for _, line := range strings.Split(string(raw), "\n") {
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			continue
		}
		var f map[string]any
		if err := json.Unmarshal([]byte(data), &f); err != nil {
			t.Fatalf("frame %q: %v", data, err)
		}
		frames = append(frames, f)
	}
	if len(frames) == 0 {
		if err := json.Unmarshal(raw, new(map[string]any)); err == nil {
			var f map[string]any
			_ = json.Unmarshal(raw, &f)
			frames = append(frames, f)
		}
	}
	if len(frames) == 0 || frames[len(frames)-1]["id"] == nil {
		t.Fatalf("%s: no response in %s", method, raw)
	}
	return frames
}

// notificationsOf are the params of the frames of method, in order.
func notificationsOf(frames []map[string]any, method string) []map[string]any {
	var out []map[string]any
	for _, f := range frames {
		if f["method"] == method {
			p, _ := f["params"].(map[string]any)
			out = append(out, p)
		}
	}
	return out
}

// TestStreamingToolsReportProgress: the progress a streaming tool reports
// reaches a client that gave a progress token, in order, on the call's
// stream before the result (the edge's own "still running" ticks do not mix
// in); a call without a token hears none.
func TestStreamingToolsReportProgress(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	t.Run(edge.ModernProtocol, func(t *testing.T) {
		frames := postFrames(t, f.URL, "tools/call", map[string]any{"name": "test_tool_with_progress", "arguments": map[string]any{}},
			map[string]any{"progressToken": "progress-1"})
		progress := notificationsOf(frames, "notifications/progress")
		if len(progress) != len(conformancesvc.ProgressSteps) || len(frames) != len(progress)+1 {
			t.Fatalf("frames %v: want %d progress notifications, then the result", frames, len(conformancesvc.ProgressSteps))
		}
		for i, p := range progress {
			if p["progressToken"] != "progress-1" || p["progress"] != conformancesvc.ProgressSteps[i] || p["total"] != 100.0 {
				t.Errorf("notification %d = %v, want progress %v of 100 for progress-1", i, p, conformancesvc.ProgressSteps[i])
			}
		}
		frames = postFrames(t, f.URL, "tools/call", map[string]any{"name": "test_tool_with_progress", "arguments": map[string]any{}}, nil)
		if len(frames) != 1 {
			t.Errorf("a call without a progress token got frames %v, want only its result", frames)
		}
	})
	t.Run("2025-11-25", func(t *testing.T) {
		var n notes
		cs := f.Connect(t, "2025-11-25", "", n.options())
		params := &mcp.CallToolParams{Name: "test_tool_with_progress", Arguments: map[string]any{}}
		params.SetProgressToken("progress-2")
		callTool(t, cs, params)
		// The client hands notifications to its handler on its own
		// schedule: wait for the three.
		var progress []*mcp.ProgressNotificationParams
		deadline := time.Now().Add(10 * time.Second)
		for len(progress) < len(conformancesvc.ProgressSteps) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			p, _ := n.taken()
			progress = append(progress, p...)
		}
		var got []float64
		for _, p := range progress {
			if p.ProgressToken != "progress-2" || p.Total != 100 {
				t.Errorf("notification %+v, want one for progress-2 of 100", p)
			}
			got = append(got, p.Progress)
		}
		slices.Sort(got) // the client may hand them over in any order
		if !slices.Equal(got, conformancesvc.ProgressSteps) {
			t.Errorf("progress = %v, want %v", got, conformancesvc.ProgressSteps)
		}
	})
}

// TestStreamingToolsLogToClientsThatAsk: the log messages a streaming tool
// reports reach a client that asked for them at a level they reach — on
// the call's stream before its result at 2026-07-28 (the request's
// io.modelcontextprotocol/logLevel), over the session in the session era
// (logging/setLevel) — and no client that did not.
func TestStreamingToolsLogToClientsThatAsk(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	t.Run(edge.ModernProtocol, func(t *testing.T) {
		call := map[string]any{"name": "test_logging_tool", "arguments": map[string]any{}}
		if frames := postFrames(t, f.URL, "tools/call", call, nil); len(frames) != 1 {
			t.Errorf("a request without a log level got frames %v, want only its result", frames)
		}
		frames := postFrames(t, f.URL, "tools/call", map[string]any{"name": "test_logging_tool", "arguments": map[string]any{}},
			map[string]any{"io.modelcontextprotocol/logLevel": "info"})
		logs := notificationsOf(frames, "notifications/message")
		var got []string
		for _, l := range logs {
			s, _ := l["data"].(string)
			got = append(got, s)
		}
		if !slices.Equal(got, conformancesvc.LogTexts) || len(frames) != len(logs)+1 {
			t.Errorf("frames %v: want the log messages %q, then the result", frames, conformancesvc.LogTexts)
		}
		frames = postFrames(t, f.URL, "tools/call", map[string]any{"name": "test_logging_tool", "arguments": map[string]any{}},
			map[string]any{"io.modelcontextprotocol/logLevel": "warning"})
		if len(frames) != 1 {
			t.Errorf("info messages reached a request at level warning: %v", frames)
		}
	})
	t.Run("2025-11-25", func(t *testing.T) {
		var n notes
		cs := f.Connect(t, "2025-11-25", "", n.options())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		callTool(t, cs, &mcp.CallToolParams{Name: "test_tool_with_logging", Arguments: map[string]any{}})
		var logs []*mcp.LoggingMessageParams
		deadline := time.Now().Add(10 * time.Second)
		for len(logs) < len(conformancesvc.LogTexts) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			_, l := n.taken()
			logs = append(logs, l...)
		}
		var got []string
		for _, l := range logs {
			if l.Level != "info" || l.Logger != "conformance" {
				t.Errorf("log message %+v, want level info from conformance", l)
			}
			s, _ := l.Data.(string)
			got = append(got, s)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(conformancesvc.LogTexts))
		if !slices.Equal(got, want) {
			t.Errorf("log messages = %q, want %q", got, want)
		}
	})
}
