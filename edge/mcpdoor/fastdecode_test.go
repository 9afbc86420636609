package mcpdoor

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// strictDecode is what decodeRequest must agree with: encoding/json
// decoding body into a fastRequest with unknown fields refused, and nothing
// after the object.
func strictDecode(body []byte) *fastRequest {
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

// Requests as clients send them: decodeRequest reads each, as
// encoding/json does, so the fast path serves them.
var clientRequests = []string{
	// The load generator's, and the official TypeScript SDK's (2026-07-28).
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get","arguments":{"id":"t-1"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`,
	`{"jsonrpc":"2.0","id":"a-7","method":"tools/call","params":{"name":"memory_save","arguments":{"key":"k","content":"a \"quoted\" {brace} [x], \\ and \u00e9"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{},"url":{}},"sampling":{},"roots":{"listChanged":true}},"io.modelcontextprotocol/clientInfo":{"name":"benchmesh","version":"1"}}}}`,
	// Indented, members in another order, numbers and literals.
	"{\n  \"method\": \"tools/call\",\n  \"params\": {\n    \"_meta\": {\"dev.toolmesh/idempotencyKey\": \"k-1\", \"traceparent\": null},\n    \"arguments\": {\"n\": -1.5e3, \"b\": [true, false, null, []], \"o\": {}},\n    \"name\": \"credits_grant\"\n  },\n  \"id\": 42,\n  \"jsonrpc\": \"2.0\"\n}\n",
	`{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"tasks_list","arguments":null}}`,
	`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"tasks_list"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_list","arguments":"a string"}}`,
}

func TestDecodeRequestReadsWhatClientsSend(t *testing.T) {
	t.Parallel()
	for _, body := range clientRequests {
		got, want := decodeRequest([]byte(body)), strictDecode([]byte(body))
		if want == nil {
			t.Fatalf("encoding/json does not decode %s", body)
		}
		if got == nil {
			t.Errorf("decodeRequest declined %s", body)
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("decodeRequest(%s) (-encoding/json +got):\n%s", body, diff)
		}
	}
}

// What decodeRequest does not read as encoding/json does, it declines.
func TestDecodeRequestDeclinesWhatItDoesNotReadAlike(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get"},"extra":1}`,
		`{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"tasks_get"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/call","params":{"name":"tasks_get"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools\/call","params":{"name":"tasks_get"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get","_meta":{"a":1,"a":2}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get"}} {}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get"}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tasks_get"}}]`,
		`{"jsonrpc":2,"id":1,"method":"tools/call","params":{"name":"tasks_get"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tâches"}}`,
		``,
	} {
		if got := decodeRequest([]byte(body)); got != nil {
			t.Errorf("decodeRequest(%s) = %+v, want nil", body, got)
		}
	}
}

// FuzzDecodeRequest holds decodeRequest to encoding/json: whatever it
// reads, encoding/json reads the same, and reading leaves the body as it
// was even when a reader appends to what it was given.
func FuzzDecodeRequest(f *testing.F) {
	for _, body := range clientRequests {
		f.Add([]byte(body))
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"x\"}","method":"tools/call","params":{"name":"n","arguments":{"a":"\\"},"_meta":{"k":[1,{"b":"}"}]}}}`))
	f.Add([]byte(` {"params":{"arguments":[],"name":"n"} , "id" : null } `))
	f.Fuzz(func(t *testing.T, body []byte) {
		orig := bytes.Clone(body)
		got := decodeRequest(body)
		if got == nil {
			return
		}
		want := strictDecode(orig)
		if want == nil {
			t.Fatalf("decodeRequest read %q, which encoding/json refuses", orig)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("decodeRequest(%q) (-encoding/json +got):\n%s", orig, diff)
		}
		raws := []json.RawMessage{got.ID}
		if got.Params != nil {
			raws = append(raws, got.Params.Arguments)
			for _, v := range got.Params.Meta {
				raws = append(raws, v)
			}
		}
		for _, r := range raws {
			_ = append(r, '!')
		}
		if !bytes.Equal(body, orig) {
			t.Fatalf("reading %q changed it to %q", orig, body)
		}
	})
}
