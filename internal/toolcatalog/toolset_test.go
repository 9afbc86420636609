package toolcatalog_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// TestProductToolsetsAreItsDomains: every tool of the product's contracts is
// in the toolset of its domain, each toolset is described by the first
// paragraph of its service's comment, and the default toolsets are the ones
// the contracts mark.
func TestProductToolsetsAreItsDomains(t *testing.T) {
	r := build(t, toolcatalog.Contracts()...)
	var defaults []string
	seen := 0
	for _, ts := range r.Toolsets() {
		if ts.Default {
			defaults = append(defaults, ts.Name)
		}
		if ts.Description == "" || strings.Contains(ts.Description, "\n") || strings.Contains(ts.Description, "Service") {
			t.Errorf("toolset %s: description %q is not one paragraph written for a model", ts.Name, ts.Description)
		}
		for _, tool := range ts.Tools {
			seen++
			if domain, _, _ := strings.Cut(tool.Name, "_"); domain != ts.Name || tool.Toolset != ts.Name {
				t.Errorf("tool %s is in toolset %s (its Toolset says %q), want its domain's", tool.Name, ts.Name, tool.Toolset)
			}
		}
	}
	if seen != len(r.Tools()) {
		t.Errorf("the toolsets hold %d tools, the registry %d", seen, len(r.Tools()))
	}
	if want := []string{"agents", "memory", "messages", "owner", "tasks"}; !cmp.Equal(defaults, want) {
		t.Errorf("default toolsets = %v, want %v", defaults, want)
	}
}

// TestToolsetOptions: a service's toolset option names its toolset and puts
// it in the default selection; a tool's toolset option moves the tool into
// another toolset of the registry.
func TestToolsetOptions(t *testing.T) {
	notes := testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingNotesService")
	r := build(t, testingService, notes)
	got := map[string][]string{}
	defaults := map[string]bool{}
	for _, ts := range r.Toolsets() {
		for _, tool := range ts.Tools {
			got[ts.Name] = append(got[ts.Name], tool.Name)
		}
		defaults[ts.Name] = ts.Default
	}
	if !cmp.Equal(got["notes"], []string{"testing_get_note", "testing_list_notes"}) {
		t.Errorf("toolset notes = %v, want the notes service's tools but testing_note_stats", got["notes"])
	}
	if len(got["testing"]) == 0 || got["testing"][len(got["testing"])-1] != "testing_write" || !strings.Contains(strings.Join(got["testing"], ","), "testing_note_stats") {
		t.Errorf("toolset testing = %v, want TestingService's tools and testing_note_stats", got["testing"])
	}
	if !defaults["notes"] || defaults["testing"] {
		t.Errorf("default toolsets %v, want notes only", defaults)
	}
	if ts := r.Toolsets()[0]; ts.Name != "notes" || !strings.HasPrefix(ts.Description, "TestingNotesService serves the notes") {
		t.Errorf("first toolset %s described %q, want notes described by its service's comment", ts.Name, ts.Description)
	}
}

// TestBadToolsetsAreRefused: a toolset the edge cannot serve stops the
// build with an error that says what to fix.
func TestBadToolsetsAreRefused(t *testing.T) {
	notes := testingv1.File_toolmesh_testing_v1_testing_proto.Services().ByName("TestingNotesService")
	if _, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{notes}, docs(t), toolcatalog.Options{}); err == nil ||
		!strings.Contains(err.Error(), `tool "testing_note_stats": toolset "testing" is not a toolset of this registry`) {
		t.Errorf("a tool moved to a toolset the registry lacks: Build = %v", err)
	}
	for _, c := range []struct {
		name   string
		opt    *toolv1.Toolset
		doc    string
		second *toolv1.Toolset // a second service's, when set
		want   string
	}{
		{"underscore", &toolv1.Toolset{Name: "fake_set"}, "Fakes.", nil, `toolset name "fake_set" must be lower case letters`},
		{"capitals", &toolv1.Toolset{Name: "Fake"}, "Fakes.", nil, `toolset name "Fake"`},
		{"undescribed", nil, "", nil, `service toolcatalog.test.Fake0: no leading comment to describe its toolset "test"`},
		{"default disputed", &toolv1.Toolset{Name: "fake", Default: true}, "Fakes.", &toolv1.Toolset{Name: "fake"},
			`toolset "fake": its services disagree on whether it is a default toolset`},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := []*toolv1.Toolset{c.opt}
			if c.second != nil {
				opts = append(opts, c.second)
			}
			services, d := fakeServices(t, c.doc, opts...)
			if _, err := toolcatalog.Build(services, d, toolcatalog.Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Build = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// Two services of one toolset with a good option build into one
	// toolset described by both.
	services, d := fakeServices(t, "Fakes things.", &toolv1.Toolset{Name: "fake"}, &toolv1.Toolset{Name: "fake"})
	r, err := toolcatalog.Build(services, d, toolcatalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ts := r.Toolsets(); len(ts) != 1 || len(ts[0].Tools) != 2 || ts[0].Description != "Fakes things." {
		t.Errorf("toolsets = %+v, want one toolset fake with both services' tools", ts)
	}
}

// fakeServices makes up one service per toolset option, in a package
// toolcatalog.test, each with one READ tool and described by doc.
func fakeServices(t *testing.T, doc string, opts ...*toolv1.Toolset) ([]protoreflect.ServiceDescriptor, toolcatalog.Docs) {
	t.Helper()
	d := docs(t)
	fdp := &descriptorpb.FileDescriptorProto{
		Name:       proto.String(fmt.Sprintf("toolcatalog_test/%s.proto", strings.ReplaceAll(t.Name(), "/", "_"))),
		Package:    proto.String("toolcatalog.test"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"toolmesh/testing/v1/testing.proto", "toolmesh/tool/v1/tool.proto"},
	}
	for i, opt := range opts {
		name := fmt.Sprintf("Fake%d", i)
		sopts := &descriptorpb.ServiceOptions{}
		if opt != nil {
			proto.SetExtension(sopts, toolv1.E_Toolset, opt)
		}
		mopts := &descriptorpb.MethodOptions{}
		proto.SetExtension(mopts, toolv1.E_Tool, &toolv1.Tool{Name: fmt.Sprintf("fake_get%d", i), Title: "Get", Kind: toolv1.Kind_KIND_READ})
		fdp.Service = append(fdp.Service, &descriptorpb.ServiceDescriptorProto{Name: proto.String(name), Options: sopts,
			Method: []*descriptorpb.MethodDescriptorProto{{Name: proto.String("Get"), InputType: proto.String(".toolmesh.testing.v1.EchoRequest"),
				OutputType: proto.String(".toolmesh.testing.v1.EchoResponse"), Options: mopts}}})
		d[protoreflect.FullName("toolcatalog.test."+name+".Get")] = "Gets."
		if doc != "" {
			d[protoreflect.FullName("toolcatalog.test."+name)] = doc
		}
	}
	fd, err := protodesc.NewFile(fdp, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	var out []protoreflect.ServiceDescriptor
	for i := 0; i < fd.Services().Len(); i++ {
		out = append(out, fd.Services().Get(i))
	}
	return out, d
}
