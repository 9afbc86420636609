package toolcall

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"
)

// message carries any request or response through one connect.Client
// type: the codecs see a proto.Message (its ProtoReflect is the wrapped
// message's).
type message struct{ proto.Message }

// messageType is the Go type of desc's messages: the generated one, linked
// into every binary that has the contracts (table-driven and far cheaper to
// encode, decode and allocate than a dynamic message), else a dynamic one.
func messageType(desc protoreflect.MessageDescriptor) protoreflect.MessageType {
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(desc.FullName()); err == nil && mt.Descriptor() == desc {
		return mt
	}
	return dynamicpb.NewMessageType(desc)
}
