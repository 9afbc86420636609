package toolcall

import "github.com/toolmesh/toolmesh/internal/toolschema"

// ErrorSchema is the JSON Schema of an error envelope: what every failed
// tool call carries as structuredContent. A tool's output schema is the
// union of its success envelope and this, so that a client checking results
// against the schema accepts failures too. It is repeated in every tool's
// schema, so it names only what tells a failure apart (the status, and that
// error_type and domain_code are there); docs/errors.md and the server's
// instructions say what the fields mean and which codes there are.
func ErrorSchema() toolschema.Schema {
	return toolschema.Schema{
		"title":      "Error",
		"type":       "object",
		"properties": toolschema.Schema{"status": toolschema.Schema{"const": "error"}},
		"required":   []string{"status", "error_type", "domain_code"},
	}
}
