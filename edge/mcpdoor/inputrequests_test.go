//lint:file-ignore SA1019 the test client answers sampling and roots requests, deprecated from 2026-07-28 on (SEP-2577) but still served

package mcpdoor_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolmesh/toolmesh/edge"
	"github.com/toolmesh/toolmesh/edge/edgetest"
)

// A tool's sampling and roots questions (testing_summarize): the client's
// model writes the summary, the client's roots are listed, over a 2025
// session (server-sent sampling/createMessage and roots/list) and as
// 2026-07-28 input requests, and the result is the same.

// model is a client's model and roots for testing_summarize: it records the
// prompts it is given and answers each with text.
type model struct {
	mu      sync.Mutex
	prompts []string
	text    string
}

func (m *model) handler(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, msg := range req.Params.Messages {
		if tc, ok := msg.Content.(*mcp.TextContent); ok {
			m.prompts = append(m.prompts, req.Params.SystemPrompt+"|"+tc.Text)
		}
	}
	return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: m.text}}, nil
}

func (m *model) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.prompts)
}

// summarizeClient connects to f at version with a model answering text,
// and, when roots, the client's roots.
func summarizeClient(t *testing.T, f *edgetest.Fixture, version string, m *model, roots bool) *mcp.ClientSession {
	t.Helper()
	// The capabilities are set in full: the go-sdk client declares roots
	// unless told otherwise.
	opts := &mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}}
	if m != nil {
		opts.CreateMessageHandler = m.handler
		opts.Capabilities.Sampling = &mcp.SamplingCapabilities{}
	}
	if roots {
		opts.Capabilities.RootsV2 = &mcp.RootCapabilities{}
	}
	cs := f.ConnectWith(t, version, opts, func(c *mcp.Client) {
		if roots {
			c.AddRoots(&mcp.Root{URI: "file:///work/a", Name: "a"}, &mcp.Root{URI: "file:///work/b", Name: "b"})
		}
	})
	return cs
}

func TestSamplingAndRootsAnswerAToolsQuestions(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, version := range []string{edge.ModernProtocol, "2025-11-25"} {
		t.Run(version, func(t *testing.T) {
			md := &model{text: "Tides follow the moon."}
			cs := summarizeClient(t, f, version, md, true)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_summarize", Arguments: map[string]any{"topic": "tides"}})
			if err != nil {
				t.Fatal(err)
			}
			env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
			if env.Status != "ok" || !edgetest.JsonEqual(string(env.Data), `{"summary":"Tides follow the moon.","roots":["file:///work/a","file:///work/b"]}`) {
				t.Fatalf("result = %s, want the model's summary and the client's roots", edgetest.Structured(t, res))
			}
			if got, want := md.asked(), []string{"You write one-sentence summaries.|Summarize tides in one sentence."}; !slices.Equal(got, want) {
				t.Errorf("the model was asked %q, want once: %q", got, want)
			}
			if strings.Contains(string(edgetest.Structured(t, res)), "notes") {
				t.Errorf("result = %s, want no notes: nothing fell back", edgetest.Structured(t, res))
			}
		})
	}
}

// A model's answer that breaks the field's rules (a summary over 80
// characters) is refused at the boundary: the call takes the question's
// fallback and says so. A client that offers no sampling gets the fallback
// at once; one that offers no roots, which testing_summarize needs, is
// refused: a capability_gap naming client.roots in the 2025 eras, -32021
// naming roots at 2026-07-28.
func TestWhatAClientCannotGiveFallsBackOrIsRefused(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	for _, version := range []string{edge.ModernProtocol, "2025-11-25"} {
		t.Run(version+"/model breaks the rules", func(t *testing.T) {
			md := &model{text: strings.Repeat("The tides rise and fall twice a day. ", 5)}
			cs := summarizeClient(t, f, version, md, true)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_summarize", Arguments: map[string]any{"topic": "tides"}})
			if err != nil {
				t.Fatal(err)
			}
			var env struct {
				Status string          `json:"status"`
				Data   json.RawMessage `json:"data"`
				Notes  []string        `json:"notes"`
			}
			if err := json.Unmarshal(edgetest.Structured(t, res), &env); err != nil {
				t.Fatal(err)
			}
			if env.Status != "ok" || !edgetest.JsonEqual(string(env.Data), `{"summary":"tides","roots":["file:///work/a","file:///work/b"]}`) {
				t.Fatalf("result = %s, want the topic as the summary", edgetest.Structured(t, res))
			}
			if len(env.Notes) != 1 || !strings.Contains(env.Notes[0], "refused") || !strings.Contains(env.Notes[0], "the topic stands in for the summary") {
				t.Errorf("notes = %q, want the refusal and the fallback said", env.Notes)
			}
			if n := len(md.asked()); n != 1 {
				t.Errorf("the model was asked %d times, want once", n)
			}
		})
		t.Run(version+"/no sampling", func(t *testing.T) {
			cs := summarizeClient(t, f, version, nil, true)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_summarize", Arguments: map[string]any{"topic": "tides"}})
			if err != nil {
				t.Fatal(err)
			}
			got := string(edgetest.Structured(t, res))
			if !strings.Contains(got, `"summary":"tides"`) || !strings.Contains(got, "The client offers no sampling, so the topic stands in for the summary.") {
				t.Errorf("result = %s, want the fallback, said", got)
			}
		})
		t.Run(version+"/no roots", func(t *testing.T) {
			before := m.Backend.Calls("Summarize")
			cs := summarizeClient(t, f, version, &model{text: "Short."}, false)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "testing_summarize", Arguments: map[string]any{"topic": "tides"}})
			if version == edge.ModernProtocol {
				if err == nil || !strings.Contains(err.Error(), "-32021") && !strings.Contains(err.Error(), "roots") {
					t.Errorf("call = %v, %v; want -32021 naming roots", res, err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				env := edgetest.EnvelopeJSON(t, edgetest.Structured(t, res))
				if env.DomainCode != "capability_gap" || env.Gap != "client.roots" {
					t.Errorf("result = %s, want a capability_gap naming client.roots", edgetest.Structured(t, res))
				}
			}
			if n := m.Backend.Calls("Summarize"); n != before {
				t.Errorf("Summarize ran %d times, want none", n-before)
			}
		})
	}
}

// Inside an MCP task (2026-07-28, the tasks extension), the same questions
// are the task's input requests, of their own methods, answered with
// tasks/update; the summary comes from the model's answer.
func TestSamplingAndRootsInsideATask(t *testing.T) {
	t.Parallel()
	m := edgetest.NewMRTRMesh(t)
	m.StartWorker(t)
	f := m.Edge(t, nil)
	caps := map[string]any{"sampling": map[string]any{}, "roots": map[string]any{}, "extensions": edgetest.TasksCaps["extensions"]}
	created := wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tools/call", map[string]any{"name": "testing_summarize", "arguments": map[string]any{"topic": "tides"}}, caps))
	w := getTask(t, f.URL, created.TaskID)
	if w.Status != "input_required" || w.InputRequests["r1.summary"].Method != "sampling/createMessage" || w.InputRequests["r1.roots"].Method != "roots/list" {
		t.Fatalf("tasks/get = %+v, want a sampling and a roots input request", w)
	}
	wireTaskOf(t, edgetest.TaskRequest(t, f.URL, "tasks/update", map[string]any{"taskId": created.TaskID, "inputResponses": map[string]any{
		"r1.summary": map[string]any{"role": "assistant", "model": "m", "content": map[string]any{"type": "text", "text": "Tides follow the moon."}},
		"r1.roots":   map[string]any{"roots": []any{map[string]any{"uri": "file:///work/a"}}},
	}}, caps))
	done := awaitTask(t, f.URL, created.TaskID, "the summary", terminal)
	if done.Status != "completed" || !strings.Contains(string(done.Result.StructuredContent), `"summary":"Tides follow the moon."`) ||
		!strings.Contains(string(done.Result.StructuredContent), `"roots":["file:///work/a"]`) {
		t.Errorf("done = %+v, want the model's summary and the root", done)
	}
}
