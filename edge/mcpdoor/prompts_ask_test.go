package mcpdoor_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A prompt whose required argument the client left out asks the user for
// it, when the client can be asked — an input_required result at
// 2026-07-28, an elicitation over the session before — and renders with
// the answer; a client that cannot be asked, or a user who declines, gets
// the argument named in an invalid-params error.
func TestPromptsAskForMissingArguments(t *testing.T) {
	t.Parallel()
	f := newContentEdge(t)
	for _, v := range eras {
		t.Run(v, func(t *testing.T) {
			var mu sync.Mutex
			var asked []*mcp.ElicitParams
			answer := func(action string) *mcp.ClientOptions {
				return &mcp.ClientOptions{ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					asked = append(asked, r.Params)
					mu.Unlock()
					return &mcp.ElicitResult{Action: action, Content: map[string]any{"context": "the user's context"}}, nil
				}}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			cs := f.Connect(t, v, "", answer("accept"))
			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_input_required_result_prompt"})
			if err != nil || len(res.Messages) == 0 {
				t.Fatalf("prompts/get: %+v, %v", res, err)
			}
			if b, _ := json.Marshal(res.Messages); !strings.Contains(string(b), "Context: the user's context") {
				t.Errorf("messages = %s, want the answer rendered", b)
			}
			mu.Lock()
			if len(asked) != 1 {
				t.Fatalf("asked %d times, want once", len(asked))
			}
			var schema struct {
				Properties map[string]any `json:"properties"`
				Required   []string       `json:"required"`
			}
			b, _ := json.Marshal(asked[0].RequestedSchema)
			if err := json.Unmarshal(b, &schema); err != nil || schema.Properties["context"] == nil || len(schema.Required) != 1 || schema.Required[0] != "context" {
				t.Errorf("form = %s, want the context argument, required", b)
			}
			mu.Unlock()

			// Given, the argument is not asked for.
			res, err = cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_input_required_result_prompt", Arguments: map[string]string{"context": "given"}})
			if err != nil || len(asked) != 1 {
				t.Fatalf("prompts/get with the argument: %+v, %v; asked %d times, want still once", res, err, len(asked))
			}

			declined := f.Connect(t, v, "", answer("decline"))
			if _, err := declined.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_input_required_result_prompt"}); err == nil || !strings.Contains(err.Error(), "arguments") {
				t.Errorf("declined: %v, want an error about the arguments", err)
			}
			mute := f.Connect(t, v, "", nil)
			if _, err := mute.GetPrompt(ctx, &mcp.GetPromptParams{Name: "test_input_required_result_prompt"}); err == nil || !strings.Contains(err.Error(), "context") {
				t.Errorf("a client that cannot be asked: %v, want an error naming context", err)
			}
		})
	}
}
