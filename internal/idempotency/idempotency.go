// Package idempotency is the one rule every service applies to idempotency
// keys (the Idempotency-Key header of a mesh call, or a key the request
// itself carries, like a credits reference):
//
//   - the same key with the same request gives the first result, and
//     changes nothing more;
//   - the same key with a different request is refused as a conflict
//     (AlreadyExists) naming the key, and changes nothing.
//
// "The same request" is decided by Digest, stored beside the key with the
// first result. A service that answers with an earlier result says so with
// MarkReplay, so that callers who keep records of changes (the edge's audit
// trail) can tell a replay from a change.
package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/toolmesh/toolmesh/internal/mesh"
)

// Call is what a store keeps beside a result to recognise a retry: the
// call's idempotency key ("" when it has none) and the digest of its
// request.
type Call struct {
	Key    string
	Digest string
}

// CallOf returns the Call of the handler call in ctx with request req (with
// its volatile fields cleared, see Digest).
func CallOf(ctx context.Context, req proto.Message) Call {
	return Call{Key: mesh.FromContext(ctx).IdempotencyKey, Digest: Digest(req)}
}

// KeyOrNil is the key to store: nil (SQL NULL, which holds nothing) when
// the call has none.
func (c Call) KeyOrNil() any {
	if c.Key == "" {
		return nil
	}
	return c.Key
}

// ErrKeyReused is a store's answer to a key already held by the result of a
// different request.
var ErrKeyReused = errors.New("idempotency key already used with a different request")

// Digest returns the digest of a request: "sha256:" and the hex SHA-256 of
// its deterministic protobuf encoding. Callers clear the fields that do not
// change what the request does (how long to wait for an answer, say) on a
// copy first. A field added to the message later keeps the digests of
// requests that leave it unset.
func Digest(req proto.Message) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		// Only a message with invalid UTF-8 in a string field fails, and
		// such a request never gets past validation; digest it anyway.
		b = []byte(fmt.Sprintf("%T %v", req, err))
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Conflict is the error for a key reused with a different request. what
// names the key for the caller: `idempotency key "k"` or `reference "r"`.
func Conflict(what string) *connect.Error {
	return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf(
		"%s was already used with a different request; repeat that request to get its result, or use a new key", what))
}

// KeyConflict is Conflict for the call's idempotency key.
func KeyConflict(key string) *connect.Error {
	return Conflict(fmt.Sprintf("idempotency key %q", key))
}

// HeaderReplayOf is the response header of a call that changed nothing
// because it repeated an earlier call: its value is the idempotency key of
// that first call (empty when the first call carried none).
const HeaderReplayOf = "Toolmesh-Replay-Of"

// MarkReplay marks the response of the handler call in ctx as a replay of
// the call whose idempotency key was firstCallID.
func MarkReplay(ctx context.Context, firstCallID string) {
	if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
		info.ResponseHeader().Set(HeaderReplayOf, firstCallID)
	}
}

// ReplayOf reads a response's headers: whether the call was a replay and the
// idempotency key of the first call.
func ReplayOf(h http.Header) (firstCallID string, replay bool) {
	v, ok := h[http.CanonicalHeaderKey(HeaderReplayOf)]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}
