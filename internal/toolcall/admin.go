package toolcall

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// The admin guardrail inputs every ADMIN tool takes (docs/edge.md): confirm,
// the JSON literal true, and a non-blank reason.
const (
	AdminConfirm = "confirm"
	AdminReason  = "reason"
)

// MissingAdmin lists, in order, the admin inputs args lacks: confirm unless
// it is the JSON literal true (truthy non-booleans do not count), reason
// unless it is a string with a non-space character.
func MissingAdmin(args map[string]json.RawMessage) []string {
	var missing []string
	if !bytes.Equal(bytes.TrimSpace(args[AdminConfirm]), []byte("true")) {
		missing = append(missing, AdminConfirm)
	}
	var reason string
	if json.Unmarshal(args[AdminReason], &reason) != nil || strings.TrimSpace(reason) == "" {
		missing = append(missing, AdminReason)
	}
	return missing
}

// StripAdmin returns the arguments an ADMIN call's request message decodes
// from — confirm and reason removed, unless the message has fields of those
// names — and the trimmed reason.
func StripAdmin(args map[string]json.RawMessage, in protoreflect.MessageDescriptor) (json.RawMessage, string, error) {
	var reason string
	_ = json.Unmarshal(args[AdminReason], &reason)
	out := make(map[string]json.RawMessage, len(args))
	for k, v := range args {
		if (k == AdminConfirm || k == AdminReason) && in.Fields().ByName(protoreflect.Name(k)) == nil {
			continue
		}
		out[k] = v
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, "", fmt.Errorf("re-encode arguments: %w", err)
	}
	return b, strings.TrimSpace(reason), nil
}
