package toolcall

import (
	"maps"
	"slices"

	"github.com/toolmesh/toolmesh/internal/toolschema"
)

// ErrorSchema is the JSON Schema of an error envelope: what every failed
// tool call carries as structuredContent. A tool's output schema is the
// union of its success envelope and this, so that a client checking results
// against the schema accepts failures too. It is repeated in every tool's
// schema, so it is kept short: the server's instructions and the messages
// say what the fields mean.
func ErrorSchema() toolschema.Schema {
	str := toolschema.Schema{"type": "string"}
	return toolschema.Schema{
		"title": "Error",
		"type":  "object",
		"properties": toolschema.Schema{
			"status":      toolschema.Schema{"const": "error"},
			"tool":        str,
			"error_type":  str,
			"domain_code": toolschema.Schema{"type": "string", "enum": slices.Sorted(maps.Keys(errorTypes))},
			"message":     str,
			"violation":   str,
			"violations": toolschema.Schema{"type": "array", "items": toolschema.Schema{"type": "object", "properties": toolschema.Schema{
				"field": str, "rule": str, "message": str,
			}}},
			"gap":                 str,
			"retry_after_seconds": toolschema.Schema{"type": "integer"},
			"error_id":            str,
		},
		"required": []string{"status", "error_type", "domain_code"},
	}
}
