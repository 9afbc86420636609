package edge

import (
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/toolmesh/toolmesh/internal/toolcatalog"
)

// Long-running tools that wait.
//
// A long_running tool whose request has an `optional int32 wait_seconds`
// field (toolcatalog.Tool.Wait) waits for its outcome in the service, for
// at most that many seconds, then answers with a handle to poll. The edge
// fills the field with its wait budget (Config.WaitBudget, whole seconds; a
// smaller value the caller gave is kept) and gives such a call the budget on
// top of CallTimeout, so the service's wait, not the edge's deadline,
// decides when a pending handle comes back. A door that makes the work a
// task its client follows (MCP tasks) asks for no wait (port.Call.NoWait):
// the call goes out with wait_seconds 0.

// setWait fills the wait of a waiting tool's request: 0 when the door makes
// the work a task, else the budget (or the caller's shorter wait).
func (p *pipeline) setWait(t *toolcatalog.Tool, req proto.Message, noWait bool) {
	budget := int64(p.cfg.WaitBudget / time.Second)
	msg := req.ProtoReflect()
	switch {
	case noWait:
		msg.Set(t.Wait, protoreflect.ValueOfInt32(0))
	case !msg.Has(t.Wait) || msg.Get(t.Wait).Int() > budget:
		msg.Set(t.Wait, protoreflect.ValueOfInt32(int32(budget)))
	}
}
