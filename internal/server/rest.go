package server

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/boundary"
)

// restJSON is the REST routes' JSON: grpc-gateway's JSONPb, with a refused
// body's fault named as strictJSON names it (JSONPb's error names the
// innermost field by its JSON name).
type restJSON struct{ *runtime.JSONPb }

func (m restJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(data)) == 0 {
			return io.EOF // no body: the routes read it as an empty request
		}
		return m.Unmarshal(data, v)
	})
}

func (m restJSON) Unmarshal(data []byte, v any) error {
	err := m.JSONPb.Unmarshal(data, v)
	if pm, ok := v.(proto.Message); ok {
		return namedFault(pm, data, err)
	}
	return err
}

// strictQuery is the REST routes' query parser: grpc-gateway's, except
// that a parameter naming no field of the request is refused, where
// grpc-gateway's ignores it (GET /v1/tasks?stauts=… listed every task).
type strictQuery struct{ runtime.DefaultQueryParser }

// useStrictQuery makes strictQuery grpc-gateway's query parser. The parser
// is one for the whole process (the option runtime.SetQueryParameterParser
// makes sets a package variable each time a mux applies it), so it is set
// once, by the first New, before any server serves; it is not a mux option,
// which would set it again while other servers read it.
var useStrictQuery = sync.OnceFunc(func() {
	runtime.SetQueryParameterParser(&strictQuery{})(nil)
})

func (p *strictQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	md := msg.ProtoReflect().Descriptor()
	for key := range values {
		if !namesAField(md, key) {
			return fmt.Errorf("unknown query parameter %q; this route takes: %s", key, boundary.FieldNames(md))
		}
	}
	return p.DefaultQueryParser.Parse(msg, values, filter)
}

// namesAField reports whether a query parameter's key names a field of md
// as grpc-gateway reads it: a dotted path of proto or JSON names through
// singular messages, and "m[k]" for a key of the map m.
func namesAField(md protoreflect.MessageDescriptor, key string) bool {
	if i := strings.IndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
		key = key[:i]
	}
	parts := strings.Split(key, ".")
	for i, name := range parts {
		fd := md.Fields().ByTextName(name)
		if fd == nil {
			fd = md.Fields().ByJSONName(name)
		}
		if fd == nil {
			return false
		}
		if i < len(parts)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return false
			}
			md = fd.Message()
		}
	}
	return true
}
