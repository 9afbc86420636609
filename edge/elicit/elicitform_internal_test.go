package elicit

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/proto/gen/descriptorset"
	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
)

// conformanceTool is a tool of the conformance fixtures, from the catalog.
func conformanceTool(t *testing.T, name string) *toolcatalog.Tool {
	t.Helper()
	sd := conformancev1.File_toolmesh_conformance_v1_conformance_proto.Services().Get(0)
	docs, err := toolcatalog.LoadDocs(descriptorset.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	reg, err := toolcatalog.Build([]protoreflect.ServiceDescriptor{sd}, docs, toolcatalog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tool, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	return tool
}

// formOf is the fields form of a tool, as JSON.
func formOf(t *testing.T, name string) map[string]map[string]any {
	t.Helper()
	form, err := fieldsForm(conformanceTool(t, name))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := form.MarshalJSON()
	var f struct {
		Properties map[string]map[string]any `json:"properties"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Properties
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A field's default option is proposed by its form property, as a value of
// the property's type (SEP-1034).
func TestFormsProposeTheContractsDefaults(t *testing.T) {
	props := formOf(t, "test_elicitation_sep1034_defaults")
	for field, want := range map[string]string{"name": `"John Doe"`, "age": `30`, "score": `95.5`, "status": `"active"`, "verified": `true`} {
		if got := jsonOf(props[field]["default"]); got != want {
			t.Errorf("%s: default %s, want %s (property %s)", field, got, want, jsonOf(props[field]))
		}
	}
	if got := jsonOf(props["status"]["enum"]); got != `["active","inactive","pending"]` {
		t.Errorf("status: enum %s, want the in rule's choices", got)
	}
}

// Choices: untitled (enum), titled (oneOf), legacy titled (enum and
// enumNames), and multi-selects of both kinds (SEP-1330).
func TestFormsOfferEveryKindOfChoice(t *testing.T) {
	props := formOf(t, "test_elicitation_sep1330_enums")
	for field, want := range map[string]string{
		"untitledSingle": `{"enum":["option1","option2","option3"],"title":"Untitledsingle","type":"string"}`,
		"titledSingle":   `{"oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}],"title":"Titledsingle","type":"string"}`,
		"legacyEnum":     `{"enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"],"title":"Legacyenum","type":"string"}`,
		"untitledMulti":  `{"items":{"enum":["option1","option2","option3"],"type":"string"},"minItems":1,"title":"Untitledmulti","type":"array"}`,
		"titledMulti":    `{"items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]},"minItems":1,"title":"Titledmulti","type":"array"}`,
	} {
		p := props[field]
		delete(p, "description")
		if got := jsonOf(p); got != want {
			t.Errorf("%s:\n got %s\nwant %s", field, got, want)
		}
	}
}
