package owner

import (
	"google.golang.org/protobuf/proto"

	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
)

// The events of asks (the toolmesh.tool.v1.event options in owner.proto).
// The store writes each in the transaction of the change it tells of —
// also when the change is the ask workflow's (an expiry, recorded by its
// activity through RecordAskOutcome).
const (
	EventAskCreated   = "ask.created"
	EventAskAnswered  = "ask.answered"
	EventAskExpired   = "ask.expired"
	EventAskCancelled = "ask.cancelled"
)

// AskEventName is the event of an ask ending in status ("" for a status
// that does not end an ask).
func AskEventName(status ownerv1.AskStatus) string {
	switch status {
	case ownerv1.AskStatus_ASK_STATUS_ANSWERED:
		return EventAskAnswered
	case ownerv1.AskStatus_ASK_STATUS_EXPIRED:
		return EventAskExpired
	case ownerv1.AskStatus_ASK_STATUS_CANCELLED:
		return EventAskCancelled
	}
	return ""
}

// AskEventPayload is the payload of the event name about ask a.
func AskEventPayload(name string, a *ownerv1.Ask) proto.Message {
	switch name {
	case EventAskCreated:
		return &ownerv1.AskEventCreated{AskId: a.GetAskId(), AgentId: a.GetAgentId(), Ask: a}
	case EventAskAnswered:
		return &ownerv1.AskEventAnswered{AskId: a.GetAskId(), AgentId: a.GetAgentId(), Ask: a}
	case EventAskExpired:
		return &ownerv1.AskEventExpired{AskId: a.GetAskId(), AgentId: a.GetAgentId(), Ask: a}
	case EventAskCancelled:
		return &ownerv1.AskEventCancelled{AskId: a.GetAskId(), AgentId: a.GetAgentId(), Ask: a}
	}
	panic("owner: no ask event " + name)
}
