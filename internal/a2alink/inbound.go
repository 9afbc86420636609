package a2alink

import (
	"strconv"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"

	inboundv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/inbound/v1"
)

// The A2A shape of the tasks that inbound messages open (the
// toolmesh.inbound.v1 contract's Inbound and InboundEvent): one renderer
// for the A2A door, which streams them, and the worker, which pushes them,
// so a stream and a push of the same event say the same.

// EventsExtension is the URI of the extension under which a task's
// events carry their ids, and a task snapshot the id of the last event it
// shows (metadata, {"id": ..., "seq": n} and {"last_event_id": ...}).
const EventsExtension = "https://github.com/toolmesh/toolmesh/a2a/ext/events/v1"

// ParamLastEventID is the service parameter (HTTP header, gRPC metadata)
// that resumes a task subscription after an event: the id of the last
// event the subscriber has, or the last_event_id of its snapshot.
const ParamLastEventID = "Last-Event-ID"

// EventID is the id of event seq of a task: unique across tasks, so a
// receiver of several tasks' pushes dedupes by it.
func EventID(taskID string, seq int64) string {
	return taskID + "/" + strconv.FormatInt(seq, 10)
}

// ParseEventID is the seq of an event id of the task, or false.
func ParseEventID(taskID, id string) (int64, bool) {
	rest, ok := strings.CutPrefix(id, taskID+"/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n >= 0
}

// state is an inbound status as an A2A task state.
func state(s inboundv1.InboundStatus) a2a.TaskState {
	switch s {
	case inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED:
		return a2a.TaskStateCompleted
	case inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED:
		return a2a.TaskStateCanceled
	}
	return a2a.TaskStateWorking
}

// InboundStatus is the inbound status of an A2A task state, and false for
// a state no inbound task is ever in.
func InboundStatus(s a2a.TaskState) (inboundv1.InboundStatus, bool) {
	switch s {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking:
		return inboundv1.InboundStatus_INBOUND_STATUS_WORKING, true
	case a2a.TaskStateCompleted:
		return inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED, true
	case a2a.TaskStateCanceled:
		return inboundv1.InboundStatus_INBOUND_STATUS_CANCELLED, true
	}
	return inboundv1.InboundStatus_INBOUND_STATUS_UNSPECIFIED, false
}

// answerMessage is the recipient's answer as an agent message of the task.
func answerMessage(in *inboundv1.Inbound, text, messageID string) *a2a.Message {
	m := a2a.NewMessage(a2a.MessageRoleAgent, a2a.NewTextPart(text))
	m.ID, m.TaskID, m.ContextID = messageID, a2a.TaskID(in.GetTaskId()), in.GetContextId()
	return m
}

func answerArtifact(text, messageID string) *a2a.Artifact {
	return &a2a.Artifact{ID: a2a.ArtifactID("answer-" + messageID), Name: "answer", Parts: a2a.ContentParts{a2a.NewTextPart(text)}}
}

// Task is an inbound task as A2A shows it: the sender's message in its
// history, and once the recipient answered, the answer as the status
// message, in the history and as the artifact "answer". Its metadata says
// where it is in the mesh (depth, message, thread) and which event it
// shows last.
func Task(in *inboundv1.Inbound) *a2a.Task {
	user := a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart(in.GetText()))
	user.ID, user.TaskID, user.ContextID = in.GetA2AMessageId(), a2a.TaskID(in.GetTaskId()), in.GetContextId()
	at := in.GetUpdateTime().AsTime()
	t := &a2a.Task{
		ID:        a2a.TaskID(in.GetTaskId()),
		ContextID: in.GetContextId(),
		History:   []*a2a.Message{user},
		Status:    a2a.TaskStatus{State: state(in.GetStatus()), Timestamp: &at},
		Metadata: map[string]any{
			DepthExtension: map[string]any{"depth": in.GetDepth(), "message_id": in.GetMessageId(), "thread_id": in.GetThreadId(),
				"agent": in.GetAgentId(), "sender": in.GetSender()},
			EventsExtension: map[string]any{"last_event_id": EventID(in.GetTaskId(), in.GetVersion()), "version": in.GetVersion()},
		},
	}
	if in.GetStatus() == inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED {
		answer := answerMessage(in, in.GetAnswer(), in.GetAnswerMessageId())
		t.Status.Message = answer
		t.History = append(t.History, answer)
		t.Artifacts = []*a2a.Artifact{answerArtifact(in.GetAnswer(), in.GetAnswerMessageId())}
	}
	return t
}

// Event is one event of an inbound task as A2A streams and pushes it: a
// status update, or the answer as an artifact update; its metadata carries
// its id.
func Event(in *inboundv1.Inbound, ev *inboundv1.InboundEvent) a2a.Event {
	meta := map[string]any{EventsExtension: map[string]any{"id": EventID(ev.GetTaskId(), ev.GetSeq()), "seq": ev.GetSeq()}}
	task := a2a.TaskInfo{TaskID: a2a.TaskID(ev.GetTaskId()), ContextID: in.GetContextId()}
	if ev.GetKind() == inboundv1.InboundEventKind_INBOUND_EVENT_KIND_ANSWER {
		return &a2a.TaskArtifactUpdateEvent{TaskID: task.TaskID, ContextID: task.ContextID, LastChunk: true,
			Artifact: answerArtifact(ev.GetText(), ev.GetMessageId()), Metadata: meta}
	}
	at := ev.GetTime().AsTime()
	st := a2a.TaskStatus{State: state(ev.GetStatus()), Timestamp: &at}
	if ev.GetStatus() == inboundv1.InboundStatus_INBOUND_STATUS_COMPLETED {
		st.Message = answerMessage(in, ev.GetText(), ev.GetMessageId())
	}
	return &a2a.TaskStatusUpdateEvent{TaskID: task.TaskID, ContextID: task.ContextID, Status: st, Metadata: meta}
}

// Final reports whether ev is the last event of its task.
func Final(ev *inboundv1.InboundEvent) bool {
	return ev.GetKind() == inboundv1.InboundEventKind_INBOUND_EVENT_KIND_STATUS && ev.GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_WORKING
}

// Ended reports whether the task has ended.
func Ended(in *inboundv1.Inbound) bool {
	return in.GetStatus() != inboundv1.InboundStatus_INBOUND_STATUS_WORKING
}
