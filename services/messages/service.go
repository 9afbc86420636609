// Package messages is agent-to-agent messaging: an agent sends a message to
// another agent in a thread and reads its inbox or a thread. Agents see only
// messages they sent or received.
package messages

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"
	"github.com/toolmesh/toolmesh/internal/clock"
	"github.com/toolmesh/toolmesh/internal/idempotency"
	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	messagesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/messages/v1/messagesv1connect"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	// MaxDepth is the invocation depth (mesh.Caller.Depth) from which Send
	// is refused: agents that message each other from inside tool calls
	// would otherwise loop without end.
	MaxDepth = 3
	// DedupWindow is how long an identical message (same sender, recipient
	// and first DedupPrefix characters) is suppressed after the original.
	DedupWindow = 30 * time.Second
	// DedupPrefix is how many leading characters (Unicode code points) of a
	// message decide whether it repeats an earlier one.
	DedupPrefix = 200
)

// Config tunes the service.
type Config struct {
	// Now is the clock; time.Now when nil.
	Now clock.Clock
}

// Service implements toolmesh.messages.v1.MessagesService.
type Service struct {
	store Store
	now   clock.Clock
}

var _ messagesv1connect.MessagesServiceHandler = (*Service)(nil)

// New returns the service over store.
func New(store Store, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{store: store, now: cfg.Now}
}

// Registration describes the service for internal/server: its Connect
// handler and its REST gateway routes.
func (s *Service) Registration() server.Service {
	return server.Register(messagesv1connect.MessagesServiceName, messagesv1connect.MessagesServiceHandler(s), messagesv1connect.NewMessagesServiceHandler, messagesv1.RegisterMessagesServiceHandler)
}

// Send implements MessagesService.Send.
func (s *Service) Send(ctx context.Context, req *messagesv1.SendRequest) (*messagesv1.SendResponse, error) {
	from, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	call := mesh.FromContext(ctx)
	if depth := call.Caller.Depth; depth >= MaxDepth {
		// FailedPrecondition, not ResourceExhausted: nothing refills with
		// time, so the caller must not back off and retry (the edge would
		// report rate_limited); and not PermissionDenied or InvalidArgument,
		// since neither the caller nor the arguments are at fault — the call
		// chain it sits in is too deep.
		return nil, connect.NewError(connect.CodeFailedPrecondition,
			//lint:ignore ST1005 the contract fixes this user-facing sentence, capital and full stop included
			fmt.Errorf("Cannot send message: invocation depth %d exceeds maximum of %d.", depth, MaxDepth))
	}
	// Stored times have millisecond precision; answer with what is stored.
	now := s.now().UTC().Truncate(time.Millisecond)
	thread := req.GetThreadId()
	if thread == "" {
		thread = ids.NewAt("thr", now)
	} else if err := s.requireInThread(ctx, thread, from); err != nil {
		return nil, err
	}
	m := &messagesv1.Message{
		Id:         ids.NewAt("msg", now),
		ThreadId:   thread,
		FromAgent:  from,
		ToAgent:    req.GetToAgent(),
		Text:       req.GetMessage(),
		CreateTime: timestamppb.New(now),
		// Whoever acts on the message works one invocation deeper.
		Depth: int32(call.Caller.Depth) + 1,
	}
	// A message is a repeat when the original is younger than the window:
	// one sent exactly DedupWindow ago is stored anew.
	key := idempotency.CallOf(ctx, req)
	sent, err := s.store.Send(ctx, m, DedupKey(req.GetMessage()), now.Add(-DedupWindow), key)
	if errors.Is(err, idempotency.ErrKeyReused) {
		return nil, idempotency.KeyConflict(key.Key)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("send message: %w", err))
	}
	if sent.Replayed {
		idempotency.MarkReplay(ctx, key.Key)
	}
	return &messagesv1.SendResponse{Message: sent.Message, DuplicateSuppressed: sent.Duplicate}, nil
}

// DedupKey is the digest of the first DedupPrefix characters of text: two
// messages whose keys match repeat each other.
func DedupKey(text string) string {
	n := 0
	for i := range text {
		if n == DedupPrefix {
			text = text[:i]
			break
		}
		n++
	}
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}

// requireInThread refuses threads the agent has no message in, without
// saying whether they exist.
func (s *Service) requireInThread(ctx context.Context, thread, agent string) error {
	ok, err := s.store.InThread(ctx, thread, agent)
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("look up thread: %w", err))
	}
	if !ok {
		return connect.NewError(connect.CodeNotFound,
			fmt.Errorf("thread %s not found among your messages; omit thread_id to start a new thread", thread))
	}
	return nil
}

// Get implements MessagesService.Get: the message, to its sender and its
// recipient only; to anyone else it does not exist.
func (s *Service) Get(ctx context.Context, req *messagesv1.GetRequest) (*messagesv1.GetResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	m, err := s.store.Get(ctx, req.GetMessageId())
	if errors.Is(err, ErrNotFound) || (err == nil && m.GetFromAgent() != agent && m.GetToAgent() != agent) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("message %s not found among your messages", req.GetMessageId()))
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("get message: %w", err))
	}
	return &messagesv1.GetResponse{Message: m}, nil
}

// List implements MessagesService.List.
func (s *Service) List(ctx context.Context, req *messagesv1.ListRequest) (*messagesv1.ListResponse, error) {
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	var (
		list  []*messagesv1.Message
		total int
	)
	if thread := req.GetThreadId(); thread != "" {
		if err := s.requireInThread(ctx, thread, agent); err != nil {
			return nil, err
		}
		list, total, err = s.store.Thread(ctx, thread, agent, offset, limit)
	} else {
		list, total, err = s.store.Inbox(ctx, agent, offset, limit)
	}
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("list messages: %w", err))
	}
	return &messagesv1.ListResponse{Messages: list, Page: paging.New(offset, limit, total)}, nil
}
