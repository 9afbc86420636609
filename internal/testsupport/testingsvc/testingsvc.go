// Package testingsvc implements the test-only toolmesh.testing.v1 contract: a
// backend whose behaviour tests choose (echo the caller's identity, page
// through a long list, fail in a requested way, wait). It counts the calls
// that reach it, so tests can tell whether the edge called it at all, and —
// like the product's services — applies a side effect once per idempotency
// key, counting the executions, so tests can tell that a retried call had
// its effect exactly once.
//
// A test that runs it in another process (the fault suite's build of the
// toolmesh binary serves it as the "testing" domain) learns what happened
// from its log: every Wait, and every side effect made slow with
// Options.Delays, ends with one testing.call_ended event saying whether the
// caller's cancellation or deadline cut it short, how far past the deadline
// it returned, and whether it completed although its caller had gone.
package testingsvc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/mesh"
	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"

	testingv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/testing/v1/testingv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// ItemCount is how many items ListItems pages through.
const ItemCount = 120

// SecretInError is the secret-shaped text FAILURE_INTERNAL_SECRET puts into
// its error message; it must never reach a caller or a log.
const SecretInError = "password=hunter2-db-secret sk-live0123456789abcdefghijkl"

// Options tune a Service.
type Options struct {
	// Log receives the testing.call_ended events (none when nil).
	Log *slog.Logger
	// Delays makes side effects slow: the method ("Purge", "Write", ...,
	// and "Echo", which has none) waits this long, or until its caller's
	// deadline or cancellation, before it applies its effect.
	Delays map[string]time.Duration
}

// EventCallEnded is logged when a Wait, or a delayed side effect, ends.
const EventCallEnded = "testing.call_ended"

// Service implements toolmesh.testing.v1.TestingService.
type Service struct {
	testingv1connect.UnimplementedTestingServiceHandler
	opts Options

	mu         sync.Mutex
	calls      map[string]int
	executions map[string]int
	notes      map[string]int
	balances   map[string]int64
	reminders  map[string]int
	// callers holds the caller of each method's last call that reached it.
	callers map[string]mesh.Caller
	// done holds the response of each side effect by method, agent and
	// idempotency key: a repeated key answers it again without executing.
	done map[string]proto.Message
	// visited and links are testing_link's: the agents whose visit is
	// done, and their links.
	visited map[string]bool
	links   map[string]int
}

var _ testingv1connect.TestingServiceHandler = (*Service)(nil)

// New returns an empty service.
func New() *Service { return NewWith(Options{}) }

// NewWith returns an empty service tuned by opts.
func NewWith(opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Service{opts: opts, calls: map[string]int{}, executions: map[string]int{}, notes: map[string]int{},
		balances: map[string]int64{}, reminders: map[string]int{}, callers: map[string]mesh.Caller{}, done: map[string]proto.Message{},
		links: map[string]int{}}
}

// pause waits d, or until ctx ends (then it answers the context's error,
// and the caller applies nothing), and logs how the wait ended.
func (s *Service) pause(ctx context.Context, method string, d time.Duration) error {
	start := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	var err error
	select {
	case <-t.C:
	case <-ctx.Done():
		s.count(method + ".cancelled")
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		err = connect.NewError(code, ctx.Err())
	}
	end := time.Now()
	attrs := []any{"method", method, "waited_ms", end.Sub(start).Milliseconds(), "cancelled", err != nil,
		// The wait ran out, but the caller had already gone: what the
		// handler does next, nobody waits for.
		"completed_after_cancel", err == nil && ctx.Err() != nil}
	if dl, ok := ctx.Deadline(); ok {
		attrs = append(attrs, "overrun_ms", float64(end.Sub(dl).Microseconds())/1000)
	}
	s.opts.Log.InfoContext(ctx, EventCallEnded, attrs...)
	return err
}

// slow applies Options.Delays to a side effect of method.
func (s *Service) slow(ctx context.Context, method string) error {
	d, ok := s.opts.Delays[method]
	if !ok {
		return nil
	}
	return s.pause(ctx, method, d)
}

// Server describes the service for internal/server, REST gateway included.
func (s *Service) Server() server.Service {
	return server.Register(testingv1connect.TestingServiceName, testingv1connect.TestingServiceHandler(s), testingv1connect.NewTestingServiceHandler, testingv1.RegisterTestingServiceHandler)
}

// NotesServer describes the notes service, served by the same backend.
func (s *Service) NotesServer() server.Service {
	return server.Register(testingv1connect.TestingNotesServiceName, testingv1connect.TestingNotesServiceHandler(s), testingv1connect.NewTestingNotesServiceHandler, testingv1.RegisterTestingNotesServiceHandler)
}

// Calls returns how many calls of method ("Echo", "Purge", ...) reached the
// handler; "Wait.cancelled" counts waits cut short by their caller.
func (s *Service) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *Service) count(method string) {
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
}

// seen records the caller of a call of method.
func (s *Service) seen(ctx context.Context, method string) {
	s.mu.Lock()
	s.callers[method] = mesh.FromContext(ctx).Caller
	s.mu.Unlock()
}

// LastCaller returns the caller of the last call of method ("Purge",
// "Wait", ...) that reached the service, as its mesh token said it.
func (s *Service) LastCaller(method string) mesh.Caller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callers[method]
}

// SeedNotes gives agent n notes, as n Write calls of its own would.
func (s *Service) SeedNotes(agent string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes[agent] += n
}

// Executions returns how many times the side effect of method ("Purge",
// "Remind", ...) was applied: calls repeating an idempotency key do not
// count.
func (s *Service) Executions(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executions[method]
}

// once applies a side effect for the calling agent once per idempotency
// key: a repeated key returns the first response without calling apply. It
// holds the service's lock while apply runs.
func once[T proto.Message](s *Service, ctx context.Context, method string, apply func(agent string) T) (T, error) {
	var zero T
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return zero, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callers[method] = mesh.FromContext(ctx).Caller
	key := mesh.FromContext(ctx).IdempotencyKey
	id := method + "\x00" + agent + "\x00" + key
	if key != "" {
		if res, ok := s.done[id]; ok {
			return proto.Clone(res).(T), nil
		}
	}
	res := apply(agent)
	s.executions[method]++
	if key != "" {
		s.done[id] = proto.Clone(res)
	}
	return res, nil
}

// Echo implements TestingService.Echo.
func (s *Service) Echo(ctx context.Context, req *testingv1.EchoRequest) (*testingv1.EchoResponse, error) {
	s.count("Echo")
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	if err := failure(req.GetFail()); err != nil {
		return nil, err
	}
	if err := s.slow(ctx, "Echo"); err != nil {
		return nil, err
	}
	call := mesh.FromContext(ctx)
	return &testingv1.EchoResponse{
		Message:        req.GetMessage(),
		AgentId:        call.Caller.Agent,
		Subject:        call.Caller.Subject,
		Roles:          call.Caller.Roles,
		Depth:          int32(call.Caller.Depth),
		IdempotencyKey: call.IdempotencyKey,
	}, nil
}

func failure(f testingv1.Failure) error {
	switch f {
	case testingv1.Failure_FAILURE_NOT_FOUND:
		return connect.NewError(connect.CodeNotFound, errors.New("item it_42 not found"))
	case testingv1.Failure_FAILURE_CONFLICT:
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("item it_42 cannot move from done to open"))
	case testingv1.Failure_FAILURE_RATE_LIMITED:
		//lint:ignore ST1005 mirrors the tasks service's user-facing sentence, capital and full stop included
		return connect.NewError(connect.CodeResourceExhausted, errors.New("Rate limit exceeded: maximum 3 echoes per day."))
	case testingv1.Failure_FAILURE_PERMISSION_DENIED:
		return connect.NewError(connect.CodePermissionDenied, errors.New("this call needs the owner role"))
	case testingv1.Failure_FAILURE_UNAUTHENTICATED:
		return connect.NewError(connect.CodeUnauthenticated, errors.New("the caller's identity was refused"))
	case testingv1.Failure_FAILURE_UNIMPLEMENTED:
		return connect.NewError(connect.CodeUnimplemented, errors.New("echo failures of this kind are not implemented"))
	case testingv1.Failure_FAILURE_CAPABILITY_GAP:
		return mesh.NewCapabilityGapError("testing.echo_channel", errors.New("no echo channel is configured on this service; configure one to echo"))
	case testingv1.Failure_FAILURE_UNAVAILABLE:
		return connect.NewError(connect.CodeUnavailable, errors.New("the echo store is unavailable; try again"))
	case testingv1.Failure_FAILURE_INTERNAL_SECRET:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("open store postgres://app:pa55w0rd@db:5432/x failed (%s)", SecretInError))
	case testingv1.Failure_FAILURE_PANIC:
		panic("testing: panic on request")
	case testingv1.Failure_FAILURE_INVALID_ARGUMENT:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("message: must not be a palindrome"))
	}
	return nil
}

// ListItems implements TestingService.ListItems.
func (s *Service) ListItems(ctx context.Context, req *testingv1.ListItemsRequest) (*testingv1.ListItemsResponse, error) {
	s.count("ListItems")
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	var items []string
	for i := offset; i < offset+limit && i < ItemCount; i++ {
		items = append(items, fmt.Sprintf("item-%03d", i))
	}
	return &testingv1.ListItemsResponse{Items: items, Page: paging.New(offset, limit, ItemCount)}, nil
}

// GetNote implements TestingNotesService.GetNote.
func (s *Service) GetNote(ctx context.Context, req *testingv1.GetNoteRequest) (*testingv1.GetNoteResponse, error) {
	s.count("GetNote")
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	var n int
	if _, err := fmt.Sscanf(req.GetNoteId(), "note-%d", &n); err != nil || n < 1 || n > s.noteCount(agent) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("note %s not found", req.GetNoteId()))
	}
	return &testingv1.GetNoteResponse{Note: note(agent, n)}, nil
}

// NoteStats implements TestingNotesService.NoteStats.
func (s *Service) NoteStats(ctx context.Context, _ *testingv1.NoteStatsRequest) (*testingv1.NoteStatsResponse, error) {
	s.count("NoteStats")
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	return &testingv1.NoteStatsResponse{Count: int32(s.noteCount(agent))}, nil
}

// ListNotes implements TestingNotesService.ListNotes.
func (s *Service) ListNotes(ctx context.Context, req *testingv1.ListNotesRequest) (*testingv1.ListNotesResponse, error) {
	s.count("ListNotes")
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	total := s.noteCount(agent)
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	res := &testingv1.ListNotesResponse{Page: paging.New(offset, limit, total)}
	for i := offset; i < offset+limit && i < total; i++ {
		res.Notes = append(res.Notes, note(agent, i+1))
	}
	return res, nil
}

func (s *Service) noteCount(agent string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notes[agent]
}

// note is the agent's nth note.
func note(agent string, n int) *testingv1.Note {
	return &testingv1.Note{Id: fmt.Sprintf("note-%d", n), Text: fmt.Sprintf("note %d of %s", n, agent)}
}

// Write implements TestingService.Write.
func (s *Service) Write(ctx context.Context, req *testingv1.WriteRequest) (*testingv1.WriteResponse, error) {
	s.count("Write")
	if err := s.slow(ctx, "Write"); err != nil {
		return nil, err
	}
	return once(s, ctx, "Write", func(agent string) *testingv1.WriteResponse {
		s.notes[agent]++
		return &testingv1.WriteResponse{Count: int32(s.notes[agent])}
	})
}

// VisitURL is the page testing_link asks agent's person to visit.
func VisitURL(agent string) string { return "https://mesh.example/connect/" + agent }

// VisitMessage is why testing_link asks for the visit.
const VisitMessage = "Link your account to let the agent act as you."

// Visited marks agent's visit done: testing_link runs from then on.
func (s *Service) Visited(agent string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.visited == nil {
		s.visited = map[string]bool{}
	}
	s.visited[agent] = true
}

// Link implements TestingService.Link: a VisitRequired refusal, before any
// side effect, until the agent's visit is done (Visited).
func (s *Service) Link(ctx context.Context, req *testingv1.LinkRequest) (*testingv1.LinkResponse, error) {
	s.count("Link")
	agent, err := mesh.RequireAgent(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	visited := s.visited[agent]
	s.mu.Unlock()
	if !visited {
		return nil, mesh.NewVisitRequiredError(&toolv1.VisitRequired{Url: VisitURL(agent), Message: VisitMessage, VisitId: "visit-" + agent})
	}
	return once(s, ctx, "Link", func(agent string) *testingv1.LinkResponse {
		s.links[agent]++
		return &testingv1.LinkResponse{Links: int32(s.links[agent])}
	})
}

// Summarize implements TestingService.Summarize: the summary is the one
// given, or the topic.
func (s *Service) Summarize(ctx context.Context, req *testingv1.SummarizeRequest) (*testingv1.SummarizeResponse, error) {
	s.count("Summarize")
	summary := req.GetSummary()
	if summary == "" {
		summary = req.GetTopic()
	}
	return &testingv1.SummarizeResponse{Summary: summary, Roots: req.GetRoots()}, nil
}

// Purge implements TestingService.Purge.
func (s *Service) Purge(ctx context.Context, req *testingv1.PurgeRequest) (*testingv1.PurgeResponse, error) {
	s.count("Purge")
	if err := s.slow(ctx, "Purge"); err != nil {
		return nil, err
	}
	return once(s, ctx, "Purge", func(string) *testingv1.PurgeResponse {
		n := s.notes[req.GetAgentId()]
		delete(s.notes, req.GetAgentId())
		return &testingv1.PurgeResponse{Removed: int32(n)}
	})
}

// Grant implements TestingService.Grant.
func (s *Service) Grant(ctx context.Context, req *testingv1.GrantRequest) (*testingv1.GrantResponse, error) {
	s.count("Grant")
	if err := s.slow(ctx, "Grant"); err != nil {
		return nil, err
	}
	return once(s, ctx, "Grant", func(string) *testingv1.GrantResponse {
		s.balances[req.GetAgentId()] += req.GetAmount()
		return &testingv1.GrantResponse{Balance: s.balances[req.GetAgentId()]}
	})
}

// Remind implements TestingService.Remind.
func (s *Service) Remind(ctx context.Context, req *testingv1.RemindRequest) (*testingv1.RemindResponse, error) {
	s.count("Remind")
	if _, err := reminderPeriod(req.GetEvery()); err != nil {
		return nil, err
	}
	if err := s.slow(ctx, "Remind"); err != nil {
		return nil, err
	}
	return once(s, ctx, "Remind", func(agent string) *testingv1.RemindResponse {
		s.reminders[agent]++
		return &testingv1.RemindResponse{Text: req.GetText(), Every: req.GetEvery(), Channel: req.GetChannel(), Count: int32(s.reminders[agent])}
	})
}

// PreviewEpoch is the time reminders are previewed from, so previews are the
// same in every test run.
func PreviewEpoch() time.Time { return time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC) }

// PreviewRemind implements TestingService.PreviewRemind.
func (s *Service) PreviewRemind(ctx context.Context, req *testingv1.PreviewRemindRequest) (*testingv1.PreviewRemindResponse, error) {
	s.count("PreviewRemind")
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	d, err := reminderPeriod(req.GetEvery())
	if err != nil {
		return nil, err
	}
	res := &testingv1.PreviewRemindResponse{}
	for i := 1; i <= 3; i++ {
		res.NextRuns = append(res.NextRuns, timestamppb.New(PreviewEpoch().Add(time.Duration(i)*d)))
	}
	return res, nil
}

// MinReminderPeriod is the shortest period a reminder may repeat at.
const MinReminderPeriod = 5 * time.Minute

// reminderPeriod parses "90m" or "2h" (the request rules checked the
// shape) and refuses periods under MinReminderPeriod, the way a domain
// rule the contract cannot express is refused.
func reminderPeriod(every string) (time.Duration, error) {
	d, err := time.ParseDuration(every)
	if err != nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("every: %q is not a count and a unit such as 90m or 2h", every))
	}
	if d < MinReminderPeriod {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("every: %s is too often; the minimum is %s", every, MinReminderPeriod))
	}
	return d, nil
}

// Peek implements TestingService.Peek.
func (s *Service) Peek(ctx context.Context, _ *testingv1.PeekRequest) (*testingv1.PeekResponse, error) {
	s.count("Peek")
	if _, err := mesh.RequireAgent(ctx); err != nil {
		return nil, err
	}
	return &testingv1.PeekResponse{Config: map[string]string{"mode": "test"}}, nil
}

// Wait implements TestingService.Wait.
func (s *Service) Wait(ctx context.Context, req *testingv1.WaitRequest) (*testingv1.WaitResponse, error) {
	s.count("Wait")
	s.seen(ctx, "Wait")
	start := time.Now()
	if err := s.pause(ctx, "Wait", time.Duration(req.GetMillis())*time.Millisecond); err != nil {
		return nil, err
	}
	return &testingv1.WaitResponse{WaitedMillis: int32(time.Since(start).Milliseconds())}, nil
}
