package reputation_test

import (
	"encoding/base64"

	"google.golang.org/protobuf/proto"

	reputationv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/reputation/v1"
)

func jwsDecode(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
func jwsEncode(b []byte) string          { return base64.RawURLEncoding.EncodeToString(b) }

func clone(a *reputationv1.Attestation) *reputationv1.Attestation {
	return proto.Clone(a).(*reputationv1.Attestation)
}
