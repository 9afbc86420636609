package server

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

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
		if fieldAt(md, key) == nil {
			return fmt.Errorf("unknown query parameter %q; this route takes: %s", key, boundary.FieldNames(md))
		}
	}
	if err := p.DefaultQueryParser.Parse(msg, values, filter); err != nil {
		return queryFault(md, values, filter, err)
	}
	return nil
}

// queryFault names the parameter grpc-gateway could not read and what it
// takes (grpc-gateway's own words are strconv's: `parsing field "limit":
// strconv.ParseInt: parsing "abc": invalid syntax`). It reads each
// parameter alone to find it; err is returned as it is if none fails alone.
func queryFault(md protoreflect.MessageDescriptor, values url.Values, filter *utilities.DoubleArray, err error) error {
	keys := make([]string, 0, len(values))
	for key := range values {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		one := dynamicpb.NewMessage(md)
		if new(runtime.DefaultQueryParser).Parse(one, url.Values{key: values[key]}, filter) == nil {
			continue
		}
		if fd := fieldAt(md, key); fd != nil {
			return fmt.Errorf("query parameter %s: must be %s, got %q", key, boundary.Expectation(fd), strings.Join(values[key], ","))
		}
	}
	return err
}

// fieldAt is the field a query parameter's key names as grpc-gateway reads
// it: a dotted path of proto or JSON names through singular messages, and
// "m[k]" for a key of the map m (the map's value field); nil if none.
func fieldAt(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if i := strings.IndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
		key = key[:i]
	}
	parts := strings.Split(key, ".")
	var fd protoreflect.FieldDescriptor
	for i, name := range parts {
		if fd = md.Fields().ByTextName(name); fd == nil {
			fd = md.Fields().ByJSONName(name)
		}
		if fd == nil {
			return nil
		}
		if i < len(parts)-1 {
			if fd.Message() == nil || fd.IsList() || fd.IsMap() {
				return nil
			}
			md = fd.Message()
		}
	}
	if fd != nil && fd.IsMap() {
		return fd.MapValue()
	}
	return fd
}
