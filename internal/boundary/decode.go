package boundary

import (
	"context"
	"log/slog"
	"regexp"

	"github.com/toolmesh/toolmesh/internal/logging"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// maxPayload bounds a JSON payload parsed at a boundary.
const maxPayload = 1 << 20

var strictJSON = protojson.UnmarshalOptions{} // unknown fields are errors

// protoErrPrefix is the "proto: (line 1:2): " of protojson errors.
var protoErrPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

// DecodeJSON parses an untrusted JSON payload (a webhook body, a callback)
// into msg at the boundary named label: strict protojson (unknown fields are
// an error, not dropped; a fault is named by its field's path), then msg's
// protovalidate rules. A rejection is
// logged once as boundary.validation_failed and returned as violations; nil
// means msg holds a valid payload. whole names the payload for a fault's
// message ("the payload": "the payload accepts: a, b").
func (v *Validator) DecodeJSON(ctx context.Context, log *slog.Logger, label, whole string, data []byte, msg proto.Message) []Violation {
	vs := v.decodeJSON(data, whole, msg)
	if len(vs) > 0 {
		LogRejection(ctx, log, label, vs)
	}
	return vs
}

func (v *Validator) decodeJSON(data []byte, whole string, msg proto.Message) []Violation {
	if len(data) > maxPayload {
		return []Violation{{Rule: "payload.size", Message: whole + " is larger than 1 MiB"}}
	}
	if err := strictJSON.Unmarshal(data, msg); err != nil {
		if f, ok := LocateJSONFault(msg.ProtoReflect().Descriptor(), data, whole); ok {
			return []Violation{{Field: logging.Scrub(f.Field), Rule: "payload.json", Message: logging.Scrub(f.Message)}}
		}
		return []Violation{{Rule: "payload.json", Message: logging.Scrub(protoErrPrefix.ReplaceAllString(err.Error(), ""))}}
	}
	vs, err := v.Check(msg)
	if err != nil {
		return []Violation{{Rule: "validation.error", Message: err.Error()}}
	}
	return vs
}
