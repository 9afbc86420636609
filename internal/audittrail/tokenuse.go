package audittrail

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/protoenum"
	connectionsv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/connections/v1"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// TokenUse is one use of an agent's upstream connection: a provider's
// service (github, search) obtained the connection's token to make the
// call it serves. Its record names the agent (the actor), the tool, and
// the provider, the upstream account and the connection (the reason), and
// digests the connection's metadata; never the token.
type TokenUse struct {
	// Connection is the connection used (its metadata, from GetToken).
	Connection *connectionsv1.Connection
	// Tool is the tool the call serves, e.g. "github_get_repo" (ToolOf).
	Tool string
	// CallKey is the call's idempotency key: a retried call is one use.
	// Empty: every use is its own record.
	CallKey string
}

// RecordUse appends u to the audit trail. A provider's service records a
// use before it sends the token upstream, and does not send it when the
// use could not be recorded.
func (r *Recorder) RecordUse(ctx context.Context, u TokenUse) error {
	c := u.Connection
	meta := &connectionsv1.Connection{Id: c.GetId(), Agent: c.GetAgent(), Provider: c.GetProvider(), Account: c.GetAccount()}
	provider := protoenum.Word(c.GetProvider())
	_, err := r.Record(ctx, Entry{
		CallID:    useID(c.GetId(), u.CallKey),
		Actor:     c.GetAgent(),
		Tool:      u.Tool,
		Reason:    fmt.Sprintf("used agent %s's %s connection %s, acting upstream as %s", c.GetAgent(), provider, c.GetId(), c.GetAccount()),
		Arguments: meta,
	})
	return err
}

// useID is the record's call id: from the connection and the call's key,
// so a retried call records its use once; random without a key.
func useID(connection, callKey string) string {
	if callKey == "" {
		return "use-" + rand.Text()
	}
	sum := sha256.Sum256([]byte(connection + "\x00" + callKey))
	return "use-" + hex.EncodeToString(sum[:20])
}

// ToolOf names the tool whose RPC the handler's ctx serves (its
// toolmesh.tool.v1.tool option), or fallback when it is none.
func ToolOf(ctx context.Context, fallback string) string {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return fallback
	}
	md, ok := info.Spec().Schema.(protoreflect.MethodDescriptor)
	if !ok || md.Options() == nil || !proto.HasExtension(md.Options(), toolv1.E_Tool) {
		return fallback
	}
	if t, _ := proto.GetExtension(md.Options(), toolv1.E_Tool).(*toolv1.Tool); t.GetName() != "" {
		return t.GetName()
	}
	return fallback
}
