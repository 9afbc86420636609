package toolcatalog

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// OwnerForm is an RPC marked toolmesh.tool.v1.owner_form: never a tool,
// served by the edge to the owner outside MCP.
type OwnerForm struct {
	// Service is the fully-qualified name of its service.
	Service string
	// Procedure is its Connect path, "/<package.Service>/<Method>".
	Procedure string
	Method    protoreflect.MethodDescriptor
}

// OwnerForms returns the owner's forms of services, by procedure. An RPC
// that is both a tool and an owner's form, or that streams, is an error.
func OwnerForms(services []protoreflect.ServiceDescriptor) (map[string]OwnerForm, error) {
	out := map[string]OwnerForm{}
	for _, sd := range services {
		for i := 0; i < sd.Methods().Len(); i++ {
			md := sd.Methods().Get(i)
			if !IsOwnerForm(md) {
				continue
			}
			if toolOption(md) != nil {
				return nil, fmt.Errorf("%s is both a tool and an owner's form: an owner's form carries what no tool argument may", md.FullName())
			}
			if md.IsStreamingClient() || md.IsStreamingServer() {
				return nil, fmt.Errorf("owner's form %s streams: a form is one request and one answer", md.FullName())
			}
			p := "/" + string(sd.FullName()) + "/" + string(md.Name())
			out[p] = OwnerForm{Service: string(sd.FullName()), Procedure: p, Method: md}
		}
	}
	return out, nil
}

// IsOwnerForm reports whether md is marked toolmesh.tool.v1.owner_form.
func IsOwnerForm(md protoreflect.MethodDescriptor) bool {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, toolv1.E_OwnerForm) {
		return false
	}
	v, _ := proto.GetExtension(opts, toolv1.E_OwnerForm).(bool)
	return v
}
