package toolschema_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/toolmesh/toolmesh/internal/toolschema"
)

func form(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reminder is the input form of a tool with three properties, two of them
// required.
func reminder(t *testing.T) *structpb.Struct {
	return form(t, map[string]any{
		"type": "object",
		"properties": map[string]any{
			"every":   map[string]any{"type": "string", "title": "Every", "maxLength": 8},
			"channel": map[string]any{"type": "string", "enum": []any{"CHANNEL_LOG", "CHANNEL_WEBHOOK"}},
			"note":    map[string]any{"type": "string", "title": "Note"},
		},
		"required": []any{"every", "channel"},
	})
}

func TestSubset(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		want   map[string]any
	}{
		{"required and optional", []string{"every", "note"}, map[string]any{
			"type": "object",
			"properties": map[string]any{
				"every": map[string]any{"type": "string", "title": "Every", "maxLength": 8},
				"note":  map[string]any{"type": "string", "title": "Note"},
			},
			"required": []any{"every"},
		}},
		{"required kept in the schema's order", []string{"channel", "every"}, map[string]any{
			"type": "object",
			"properties": map[string]any{
				"every":   map[string]any{"type": "string", "title": "Every", "maxLength": 8},
				"channel": map[string]any{"type": "string", "enum": []any{"CHANNEL_LOG", "CHANNEL_WEBHOOK"}},
			},
			"required": []any{"every", "channel"},
		}},
		{"only optional: no required list", []string{"note"}, map[string]any{
			"type":       "object",
			"properties": map[string]any{"note": map[string]any{"type": "string", "title": "Note"}},
		}},
		{"unknown names left out", []string{"nope", "every"}, map[string]any{
			"type":       "object",
			"properties": map[string]any{"every": map[string]any{"type": "string", "title": "Every", "maxLength": 8}},
			"required":   []any{"every"},
		}},
		{"none", nil, map[string]any{"type": "object", "properties": map[string]any{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := reminder(t)
			got := toolschema.Subset(in, tt.fields)
			if diff := cmp.Diff(form(t, tt.want), got, protocmp.Transform()); diff != "" {
				t.Errorf("Subset(%v) (-want +got):\n%s", tt.fields, diff)
			}
			if !proto.Equal(in, reminder(t)) {
				t.Errorf("Subset changed its input: %v", in)
			}
			// The result shares nothing with the input.
			for _, p := range got.GetFields()["properties"].GetStructValue().GetFields() {
				p.GetStructValue().Fields["title"] = structpb.NewStringValue("changed")
			}
			if req := got.GetFields()["required"].GetListValue(); req != nil {
				req.Values[0] = structpb.NewStringValue("changed")
			}
			if !proto.Equal(in, reminder(t)) {
				t.Errorf("changing the subset changed the input: %v", in)
			}
		})
	}
}

func TestWithoutRequired(t *testing.T) {
	tests := []struct {
		name string
		in   *structpb.Struct
		want *structpb.Struct
	}{
		{"drops the required list", reminder(t), func() *structpb.Struct {
			s := reminder(t)
			delete(s.Fields, "required")
			return s
		}()},
		{"nothing required", form(t, map[string]any{"type": "object"}), form(t, map[string]any{"type": "object"})},
		{"nil", nil, &structpb.Struct{Fields: map[string]*structpb.Value{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.in)
			got := toolschema.WithoutRequired(tt.in)
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("WithoutRequired (-want +got):\n%s", diff)
			}
			if !proto.Equal(tt.in, before) {
				t.Errorf("WithoutRequired changed its input to %v", tt.in)
			}
		})
	}
}

func TestTitles(t *testing.T) {
	tests := []struct {
		fields []string
		want   []string
	}{
		{[]string{"every", "channel"}, []string{"Every", "channel"}},
		{[]string{"note", "every"}, []string{"Note", "Every"}},
		{[]string{"unknown"}, []string{"unknown"}},
		{nil, []string{}},
	}
	for _, tt := range tests {
		if got := toolschema.Titles(reminder(t), tt.fields); !cmp.Equal(tt.want, got) {
			t.Errorf("Titles(%v) = %q, want %q", tt.fields, got, tt.want)
		}
	}
}

func TestMissing(t *testing.T) {
	tests := []struct {
		name    string
		content map[string]any
		want    []string
	}{
		{"all given", map[string]any{"every": "2h", "channel": "CHANNEL_LOG"}, nil},
		{"nothing given", map[string]any{}, []string{"every", "channel"}},
		{"null", map[string]any{"every": nil, "channel": "CHANNEL_LOG"}, []string{"every"}},
		{"blank string", map[string]any{"every": "  ", "channel": "CHANNEL_LOG"}, []string{"every"}},
		{"optional ones do not count", map[string]any{"note": "x"}, []string{"every", "channel"}},
		{"a value that is not a string counts as given", map[string]any{"every": 2.0, "channel": false}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := toolschema.Missing(reminder(t), tt.content); !cmp.Equal(tt.want, got) {
				t.Errorf("Missing(%v) = %q, want %q", tt.content, got, tt.want)
			}
		})
	}
}

func TestValidateAnswer(t *testing.T) {
	tests := []struct {
		name    string
		schema  *structpb.Struct
		content map[string]any
		wantErr string // "" when the answer fits
	}{
		{"fits", reminder(t), map[string]any{"every": "2h", "channel": "CHANNEL_LOG"}, ""},
		{"too long", reminder(t), map[string]any{"every": "every two hours", "channel": "CHANNEL_LOG"}, "every"},
		{"not one of the values", reminder(t), map[string]any{"every": "2h", "channel": "CHANNEL_SMOKE"}, "channel"},
		{"wrong type", reminder(t), map[string]any{"every": 2.0, "channel": "CHANNEL_LOG"}, "every"},
		{"a required one missing", reminder(t), map[string]any{"every": "2h"}, "channel"},
		{"required aside", toolschema.WithoutRequired(reminder(t)), map[string]any{"every": "2h"}, ""},
		{"extra properties are allowed", reminder(t), map[string]any{"every": "2h", "channel": "CHANNEL_LOG", "other": 1.0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := proto.Clone(tt.schema)
			err := toolschema.ValidateAnswer(tt.schema, tt.content)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("ValidateAnswer(%v) = %v, want it to fit", tt.content, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("ValidateAnswer(%v) = %v, want an error naming %q", tt.content, err, tt.wantErr)
			case err != nil && strings.HasPrefix(err.Error(), "validating root"):
				t.Errorf("ValidateAnswer(%v) = %v: the validator's prefix reaches the user", tt.content, err)
			}
			if !proto.Equal(tt.schema, before) {
				t.Errorf("ValidateAnswer changed the schema to %v", tt.schema)
			}
		})
	}
}

// TestValidateAnswerNamesTheSameFaultEveryTime: an answer with several
// faults is told the fault of the first field by name, every time — a
// workflow checks answers and must decide alike when it replays.
func TestValidateAnswerNamesTheSameFaultEveryTime(t *testing.T) {
	answer := map[string]any{"every": 2.0, "channel": "CHANNEL_SMOKE"}
	first := toolschema.ValidateAnswer(reminder(t), answer)
	if first == nil || !strings.Contains(first.Error(), "channel") {
		t.Fatalf("ValidateAnswer(%v) = %v, want the channel's fault first", answer, first)
	}
	for range 50 {
		if err := toolschema.ValidateAnswer(reminder(t), answer); err == nil || err.Error() != first.Error() {
			t.Fatalf("ValidateAnswer(%v) = %v, then %v", answer, first, err)
		}
	}
}
