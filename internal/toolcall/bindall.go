package toolcall

import (
	"fmt"
	"log/slog"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
)

// BindConfig says which tools BindAll binds and how to reach the services
// behind them.
type BindConfig struct {
	// Contracts are the services whose tools are bound
	// (toolcatalog.Contracts() when nil).
	Contracts []protoreflect.ServiceDescriptor
	// Services maps fully-qualified service names to base URLs. A tool
	// whose service has none is bound to no backend: it decodes and
	// validates arguments but cannot be invoked.
	Services map[string]string
	// HTTPClient reaches the services (meshclient.HTTP).
	HTTPClient connect.HTTPClient
	// Log receives boundary rejections (discarded when nil).
	Log *slog.Logger
	// ClientOptions add to each tool's client.
	ClientOptions []connect.ClientOption
}

// DefaultTimeout is the deadline of one tool call's service call: the one
// default of the edge's and the workers' --call-timeout, which a call
// carries to where it runs (an elicited call's workflow, a schedule's run).
const DefaultTimeout = 15 * time.Second

// BindAll builds the tool catalog of the contracts, with the RPC comments as
// descriptions, and binds every tool to its service, once: the bindings
// by tool name, built at start and shared by every call.
func BindAll(cfg BindConfig) (map[string]*Binding, error) {
	if cfg.Contracts == nil {
		cfg.Contracts = toolcatalog.Contracts()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	docs, err := toolcatalog.LoadDocs(descriptorset.Bytes)
	if err != nil {
		return nil, err
	}
	reg, err := toolcatalog.Build(cfg.Contracts, docs, toolcatalog.Options{})
	if err != nil {
		return nil, fmt.Errorf("build tool catalog: %w", err)
	}
	validator, err := boundary.NewValidator()
	if err != nil {
		return nil, err
	}
	out := make(map[string]*Binding, len(reg.Tools()))
	for _, t := range reg.Tools() {
		out[t.Name] = NewBinding(t, cfg.HTTPClient, cfg.Services[t.Service], validator, cfg.Log, cfg.ClientOptions...)
	}
	return out, nil
}
