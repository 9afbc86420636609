package edge

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"

	"github.com/toolmesh/toolmesh/internal/boundary"
	"github.com/toolmesh/toolmesh/internal/toolcall"
	"github.com/toolmesh/toolmesh/internal/toolcatalog"
	"github.com/toolmesh/toolmesh/internal/toolschema"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Guardrail violations of ADMIN calls.
const (
	ViolationMissingActor   = "missing_actor"
	ViolationMissingConfirm = "missing_confirm"
	ViolationMissingReason  = "missing_reason"
)

// Admin inputs the edge adds to every ADMIN tool's schema.
const (
	argConfirm = toolcall.AdminConfirm
	argReason  = toolcall.AdminReason
)

// adminInputs adds confirm and reason to the input schema of ADMIN tools. A
// request field already named so keeps its own schema and becomes required.
func adminInputs(t *toolcatalog.Tool) (toolschema.Schema, []string) {
	if t.Kind != toolv1.Kind_KIND_ADMIN {
		return nil, nil
	}
	props := toolschema.Schema{}
	fields := t.Method.Input().Fields()
	if fields.ByName(argConfirm) == nil {
		props[argConfirm] = toolschema.Schema{"type": "boolean", "const": true,
			"description": "Must be true: confirms this administrative action."}
	}
	if fields.ByName(argReason) == nil {
		props[argReason] = toolschema.Schema{"type": "string", "minLength": 1, "maxLength": 500, "pattern": `\S`,
			"description": "Why this administrative action is taken (recorded)."}
	}
	return props, []string{argConfirm, argReason}
}

// argumentsObject parses a call's arguments (already known to be an
// object, or absent) into their fields.
func argumentsObject(ctx context.Context, log *slog.Logger, b *binding, args json.RawMessage) (map[string]json.RawMessage, *toolcall.Envelope) {
	obj := map[string]json.RawMessage{}
	if a := bytes.TrimSpace(args); len(a) > 0 && !bytes.Equal(a, []byte("null")) {
		if err := json.Unmarshal(a, &obj); err != nil {
			vs := []boundary.Violation{b.call.DecodeError(err)}
			boundary.LogRejection(ctx, log, boundary.MCPTool, vs)
			return nil, toolcall.Invalid(b.tool.Name, vs)
		}
	}
	return obj, nil
}

// guard checks the admin inputs — confirm that is the JSON literal true, a
// non-blank reason — and returns the arguments the request message decodes
// from (confirm and reason removed unless the message has such fields).
// The actor was checked before.
func (p *pipeline) guard(ctx context.Context, b *binding, obj map[string]json.RawMessage) (args json.RawMessage, reason string, env *toolcall.Envelope) {
	t := b.tool
	if missing := toolcall.MissingAdmin(obj); len(missing) > 0 {
		return nil, "", missingAdminEnvelope(t.Name, missing)
	}
	out, reason, err := toolcall.StripAdmin(obj, b.call.Input())
	if err != nil {
		return nil, "", toolcall.Unexpected(ctx, p.log, t.Name, err)
	}
	return out, reason, nil
}

// missingAdminEnvelope is the guardrail_violated envelope naming exactly
// the admin inputs a call lacks.
func missingAdminEnvelope(tool string, missing []string) *toolcall.Envelope {
	v := ViolationMissingConfirm
	msg := fmt.Sprintf("%s is an administrative tool: set confirm to true (the JSON boolean) to confirm it", tool)
	if missing[0] == argReason {
		v = ViolationMissingReason
		msg = fmt.Sprintf("%s is an administrative tool: give a non-blank reason for it", tool)
	}
	if len(missing) == 2 {
		msg = fmt.Sprintf("%s is an administrative tool: set confirm to true (the JSON boolean) and give a non-blank reason", tool)
	}
	return guardrail(tool, v, msg)
}

func guardrail(tool, violation, msg string) *toolcall.Envelope {
	env := toolcall.Fail(tool, toolcall.CodeGuardrailViolated, msg)
	env.Violation = violation
	return env
}

// ClientKeyPrefix starts the idempotency key a service gets for a client's
// key: a client's keys never meet the keys the mesh makes itself.
const ClientKeyPrefix = "mcp-client-"

var idempotencyKeyRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// idempotencyKey returns the key the call carries: the client's, from
// _meta, or a fresh one.
func idempotencyKey(tool string, meta map[string]any) (string, *toolcall.Envelope) {
	v, ok := meta[MetaIdempotencyKey]
	if !ok {
		return newIdempotencyKey(), nil
	}
	s, isString := v.(string)
	if !isString || !idempotencyKeyRE.MatchString(s) {
		return "", toolcall.Invalid(tool, []boundary.Violation{{Field: "_meta." + MetaIdempotencyKey, Rule: "idempotency_key",
			Message: "must be 1 to 128 characters of letters, digits, '.', '_', ':' or '-'"}})
	}
	return ClientKeyPrefix + s, nil
}

func newIdempotencyKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "mcp-" + hex.EncodeToString(b[:])
}
