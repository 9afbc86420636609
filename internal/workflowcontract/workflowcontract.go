// Package workflowcontract reads the names of workflows and their handlers
// from the toolmesh.workflow.v1 options on protobuf messages, so that the side
// that starts or updates a workflow and the worker that runs it agree on
// names without importing each other.
package workflowcontract

import (
	"fmt"

	workflowv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/workflow/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Workflow is the contract of one workflow type.
type Workflow struct {
	Name      string
	TaskQueue string
	IDPrefix  string
	Summary   string
}

// Handler is the contract of one update, signal or query.
type Handler struct {
	Name        string
	Description string
	Kind        workflowv1.HandlerKind
}

// WorkflowOf returns the workflow contract declared on input's message type.
// It panics when the option is missing: that is a programming error caught by
// the first test that touches the workflow.
func WorkflowOf(input proto.Message) Workflow {
	w, err := workflowOf(input.ProtoReflect().Descriptor())
	if err != nil {
		panic(err)
	}
	return w
}

func workflowOf(md protoreflect.MessageDescriptor) (Workflow, error) {
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, workflowv1.E_Workflow) {
		return Workflow{}, fmt.Errorf("message %s has no toolmesh.workflow.v1.workflow option", md.FullName())
	}
	o := proto.GetExtension(opts, workflowv1.E_Workflow).(*workflowv1.Workflow)
	if o.GetName() == "" || o.GetTaskQueue() == "" {
		return Workflow{}, fmt.Errorf("workflow option on %s needs a name and a task queue", md.FullName())
	}
	return Workflow{Name: o.GetName(), TaskQueue: o.GetTaskQueue(), IDPrefix: o.GetIdPrefix(), Summary: o.GetSummary()}, nil
}

// HandlerOf returns the handler contract declared on arg's message type. It
// panics when the option is missing.
func HandlerOf(arg proto.Message) Handler {
	md := arg.ProtoReflect().Descriptor()
	opts := md.Options()
	if opts == nil || !proto.HasExtension(opts, workflowv1.E_Handler) {
		panic(fmt.Sprintf("message %s has no toolmesh.workflow.v1.handler option", md.FullName()))
	}
	o := proto.GetExtension(opts, workflowv1.E_Handler).(*workflowv1.Handler)
	if o.GetName() == "" || o.GetKind() == workflowv1.HandlerKind_HANDLER_KIND_UNSPECIFIED {
		panic(fmt.Sprintf("handler option on %s needs a name and a kind", md.FullName()))
	}
	return Handler{Name: o.GetName(), Description: o.GetDescription(), Kind: o.GetKind()}
}

// The custom search attributes (all Keyword) every toolmesh workflow sets, so
// operators can find workflows in the Temporal UI and visibility queries can
// filter on them. The dev server registers them (internal/temporaldev).
const (
	// SearchAttrAgent is the agent the workflow acts for.
	SearchAttrAgent = "ToolmeshAgent"
	// SearchAttrTool is the tool that started it (e.g. "owner_ask").
	SearchAttrTool = "ToolmeshTool"
	// SearchAttrKind is the workflow's kind prefix (e.g. "ask").
	SearchAttrKind = "ToolmeshKind"
	// SearchAttrStatus is where it is (e.g. "waiting", "answered").
	SearchAttrStatus = "ToolmeshStatus"
)

// SearchAttributes lists the custom search attribute names.
func SearchAttributes() []string {
	return []string{SearchAttrAgent, SearchAttrTool, SearchAttrKind, SearchAttrStatus}
}
