// Package schematest checks JSON values against the JSON Schemas the mesh
// publishes, with a JSON Schema 2020-12 validator (google/jsonschema-go),
// as a client that validates results would.
package schematest

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// Compile parses and resolves a schema, failing the test when it is not one.
func Compile(t testing.TB, schema []byte) *jsonschema.Resolved {
	t.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		t.Fatalf("parse schema: %v\n%s", err, schema)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("resolve schema: %v\n%s", err, schema)
	}
	return rs
}

// Check validates the JSON value doc against rs.
func Check(rs *jsonschema.Resolved, doc []byte) error {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return err
	}
	return rs.Validate(v)
}
