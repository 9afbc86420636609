package server

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/boundary"
)

// strictJSON is the services' JSON codec for the Connect and gRPC
// protocols: protojson, as connect's own, except that a request naming a
// field or an enum value its contract does not have is refused, with the
// field's path (boundary.LocateJSONFault), where connect's codec drops the
// field or leaves the enum at its default. A caller that misspells
// "priority" learns it instead of getting a task of normal priority; the
// REST routes and the edge's tools refuse the same requests. The binary
// codec, which generated clients (and the edge) use, keeps protobuf's rule:
// a field from a newer contract is carried as an unknown field, so a mesh
// part way through an upgrade still talks.
type strictJSON struct{ name string }

// strictJSONCodecs are the handler options that register strictJSON under
// both names a JSON request's content type may carry.
func strictJSONCodecs() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{"json"}),
		connect.WithCodec(strictJSON{"json; charset=utf-8"}),
	}
}

var jsonOut = protojson.MarshalOptions{}

func (c strictJSON) Name() string { return c.name }

func (strictJSON) IsBinary() bool { return false }

func (strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return jsonOut.Marshal(pm)
}

func (strictJSON) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return jsonOut.MarshalAppend(dst, pm)
}

func (strictJSON) Unmarshal(data []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(data) == 0 {
		return errors.New("an empty body is not a JSON object")
	}
	return namedFault(pm, data, protojson.Unmarshal(data, pm))
}

// namedFault is err, the error of decoding data into pm, with the fault
// named by its field's path when it can be (boundary.LocateJSONFault).
func namedFault(pm proto.Message, data []byte, err error) error {
	if err == nil {
		return nil
	}
	if v, ok := boundary.LocateJSONFault(pm.ProtoReflect().Descriptor(), data, "the request"); ok {
		return errors.New(v.Field + ": " + v.Message)
	}
	return err
}
