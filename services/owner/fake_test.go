package owner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	"github.com/toolmesh/toolmesh/services/owner"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fakeEngine stands in for Temporal in the service's tests: it keeps
// each started ask in memory and ends it when the test answers, cancels or
// expires it. It checks answers as the real workflow's validator does, so
// the tests can see how the service maps a refusal. The workflow itself is
// tested in workers/owner, and the two together against a real Temporal dev
// server in cmd/toolmesh.
type fakeEngine struct {
	mu       sync.Mutex
	asks     map[string]*fakeAsk // by workflow id
	starts   int
	startErr error
	updates  map[string]*ownerv1.AskOutcome // by update id
	extended map[string]time.Time           // by update id
	extends  []*ownerv1.ExtendUpdate
}

type fakeAsk struct {
	in      *ownerv1.AskWorkflowInput
	outcome *ownerv1.AskOutcome
	done    chan struct{}
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{asks: map[string]*fakeAsk{}, updates: map[string]*ownerv1.AskOutcome{}, extended: map[string]time.Time{}}
}

func (f *fakeEngine) StartAsk(_ context.Context, in *ownerv1.AskWorkflowInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.starts++
	if f.startErr != nil {
		return f.startErr
	}
	id := owner.WorkflowID(in.GetAgentId(), in.GetAskId())
	if _, ok := f.asks[id]; !ok {
		f.asks[id] = &fakeAsk{in: in, done: make(chan struct{})}
	}
	return nil
}

// forget drops the workflow of an ask, as if it had never started.
func (f *fakeEngine) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.asks, id)
}

func (f *fakeEngine) get(id string) *fakeAsk {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asks[id]
}

func (f *fakeEngine) WaitAsk(ctx context.Context, id string) (*ownerv1.AskOutcome, error) {
	a := f.get(id)
	if a == nil {
		return nil, owner.ErrNoWorkflow
	}
	select {
	case <-a.done:
		f.mu.Lock()
		defer f.mu.Unlock()
		return a.outcome, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeEngine) AnswerAsk(_ context.Context, id, updateID string, u *ownerv1.AnswerUpdate) (*ownerv1.AskOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o, ok := f.updates[updateID]; ok {
		return o, nil
	}
	a := f.asks[id]
	if a == nil || a.outcome != nil {
		return nil, &owner.AnswerRejectedError{Reason: ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING, Message: "the ask is no longer waiting"}
	}
	if opts := a.in.GetOptions(); len(opts) > 0 && !slices.Contains(opts, u.GetAnswer()) {
		return nil, &owner.AnswerRejectedError{Reason: ownerv1.AskRejection_ASK_REJECTION_INVALID_ANSWER, Message: "the answer must be one of the options"}
	}
	a.outcome = &ownerv1.AskOutcome{AskId: a.in.GetAskId(), Status: ownerv1.AskStatus_ASK_STATUS_ANSWERED, Answer: u.GetAnswer(),
		AnsweredBy: u.GetAnsweredBy(), ResolveTime: timestamppb.Now()}
	close(a.done)
	f.updates[updateID] = a.outcome
	return a.outcome, nil
}

func (f *fakeEngine) ExtendAsk(_ context.Context, id, updateID string, u *ownerv1.ExtendUpdate) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if at, ok := f.extended[updateID]; ok {
		return at, nil
	}
	a := f.asks[id]
	if a == nil || a.outcome != nil {
		return time.Time{}, &owner.AnswerRejectedError{Reason: ownerv1.AskRejection_ASK_REJECTION_NOT_WAITING, Message: "the ask is no longer waiting"}
	}
	if !u.GetExpireTime().AsTime().After(a.in.GetExpireTime().AsTime()) {
		return time.Time{}, &owner.AnswerRejectedError{Reason: ownerv1.AskRejection_ASK_REJECTION_INVALID_EXPIRY, Message: "the expire time is not later"}
	}
	a.in.ExpireTime = u.GetExpireTime()
	f.extends = append(f.extends, u)
	f.extended[updateID] = u.GetExpireTime().AsTime()
	return u.GetExpireTime().AsTime(), nil
}

func (f *fakeEngine) CancelAsk(_ context.Context, id string) error {
	f.end(id, ownerv1.AskStatus_ASK_STATUS_CANCELLED)
	return nil
}

func (f *fakeEngine) QueryAsk(_ context.Context, id string) (*ownerv1.AskOutcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.asks[id]
	if a == nil {
		return nil, owner.ErrNoWorkflow
	}
	if a.outcome != nil {
		return a.outcome, nil
	}
	return &ownerv1.AskOutcome{AskId: a.in.GetAskId(), Status: ownerv1.AskStatus_ASK_STATUS_PENDING}, nil
}

// end ends the ask (unless it ended) as the workflow would, without
// recording the outcome in the service: the worker does that.
func (f *fakeEngine) end(id string, st ownerv1.AskStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.asks[id]
	if a == nil || a.outcome != nil {
		return
	}
	a.outcome = &ownerv1.AskOutcome{AskId: a.in.GetAskId(), Status: st, ResolveTime: timestamppb.Now()}
	close(a.done)
}

// waitStarted waits until the ask's workflow has been started.
func (f *fakeEngine) waitStarted(ctx context.Context, id string) (*ownerv1.AskWorkflowInput, error) {
	for {
		if a := f.get(id); a != nil {
			return a.in, nil
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("the ask's workflow was never started")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (f *fakeEngine) startCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts
}

func (f *fakeEngine) failStarts(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startErr = err
}
