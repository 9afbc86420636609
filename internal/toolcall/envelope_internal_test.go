package toolcall

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// compactSeeds are valid JSON documents with what the one-pass encoding
// must get right: whitespace between tokens and inside strings, escapes
// (an escaped quote and backslash before a closing quote), characters
// json.Marshal escapes for HTML, and the line and paragraph separators.
var compactSeeds = []string{
	`{"id": "tsk_1", "title":"a <b> & c", "n": [1, 2, {"x" : null}]}`,
	"{\"text\":\"line\u2028sep\u2029 \\u003c\"}",
	` { } `,
	"[\n\t1 ,\r\n 2.5e-3 , true , false , null ]",
	`{"q":"say \"hi\" ","b":"ends in \\","s":"  two  spaces  "}`,
	`{"after an escaped quote":"a\" b \\\" c"}`,
	`"a plain string with \u2028 escaped and < raw"`,
	`{"é":"ünïcode ✓","emoji":"😀"}`,
	`-0.5`,
}

// FuzzAppendCompactJSON: for any valid JSON, the one-pass encoding writes
// what json.Compact and json.HTMLEscape write together.
func FuzzAppendCompactJSON(f *testing.F) {
	for _, s := range compactSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		if !json.Valid(src) {
			t.Skip()
		}
		var compact, want bytes.Buffer
		if err := json.Compact(&compact, src); err != nil {
			t.Fatalf("json.Compact(%q): %v", src, err)
		}
		json.HTMLEscape(&want, compact.Bytes())
		if got := appendCompactJSON(nil, src); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendCompactJSON(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}

// TestMarshalOfEncodedDataWritesWhatJSONMarshalWrites: the envelope of a
// service's answer, its data as protojson writes it, is encoded as
// json.Marshal encodes it; data set on a copy since is checked again, so
// what is not JSON is refused rather than sent.
func TestMarshalOfEncodedDataWritesWhatJSONMarshalWrites(t *testing.T) {
	t.Parallel()
	msg, err := structpb.NewStruct(map[string]any{
		"title": "a <b> & c\u2028 \"quoted\" \\",
		"n":     []any{1, 2.5, true, nil},
		"inner": map[string]any{"x": "  spaced  "},
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeOpts.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	env := OK(data, nil)
	env.encoded = env.Data
	if !env.dataEncoded() {
		t.Fatal("the envelope's data is not taken as encoded")
	}
	want, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Marshal(env)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("Marshal = %s, %v; json.Marshal gives %s", got, err, want)
	}

	changed := *env
	changed.Data = json.RawMessage(`{"x":`)
	if changed.dataEncoded() {
		t.Error("data set on a copy is taken as encoded")
	}
	if got, err := Marshal(&changed); err == nil {
		t.Errorf("data that is not JSON was encoded: %s", got)
	}
}
