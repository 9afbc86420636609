package schedules_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/toolmesh/toolmesh/internal/mesh"
	schedulesv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/schedules/v1/schedulesv1connect"
	"github.com/toolmesh/toolmesh/services/schedules"
)

// fakeEngine stands in for Temporal. Its approval "workflows" carry a
// decision out the way workers/schedules does: by calling ApplyDecision on
// the service, as a mesh component.
type fakeEngine struct {
	mu        sync.Mutex
	schedules map[string]*fakeSchedule // by Temporal id
	approvals map[string]*fakeApproval // by workflow id
	// client reaches the service under test (set once it serves).
	client schedulesv1connect.SchedulesServiceClient
	// failStart fails StartApproval; failUpdate fails UpdateSchedule.
	failStart, failUpdate error
}

type fakeSchedule struct {
	paused bool
	note   string
	spec   schedules.Spec
	run    *schedulesv1.RunInput
	// tampered is set when the schedule was changed behind the service's
	// back (as `temporal schedule update` would).
	tampered bool
}

type fakeApproval struct {
	in        *schedulesv1.ApprovalInput
	decided   bool
	withdrawn bool
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{schedules: map[string]*fakeSchedule{}, approvals: map[string]*fakeApproval{}}
}

func (f *fakeEngine) hash(s *fakeSchedule) string {
	args, _ := protojson.Marshal(s.run)
	sum := sha256.Sum256(fmt.Appendf(nil, "%s|%s|%v", s.spec.Summary(), args, s.tampered))
	return hex.EncodeToString(sum[:16])
}

func (f *fakeEngine) CreateSchedule(_ context.Context, s *schedulesv1.Schedule, spec schedules.Spec, run *schedulesv1.RunInput) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.schedules[s.GetTemporalScheduleId()]
	if !ok {
		fs = &fakeSchedule{paused: true, spec: spec, run: run}
		f.schedules[s.GetTemporalScheduleId()] = fs
	}
	return f.hash(fs), nil
}

func (f *fakeEngine) UpdateSchedule(_ context.Context, s *schedulesv1.Schedule, spec schedules.Spec, run *schedulesv1.RunInput, note string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failUpdate != nil {
		return "", f.failUpdate
	}
	fs, ok := f.schedules[s.GetTemporalScheduleId()]
	if !ok {
		return "", schedules.ErrNotFound
	}
	if fs.run.GetRevision() <= run.GetRevision() {
		fs.spec, fs.run, fs.paused, fs.note, fs.tampered = spec, run, true, note, false
	}
	if fs.run.GetRevision() != run.GetRevision() {
		return "", schedules.ErrSuperseded
	}
	return f.hash(fs), nil
}

func (f *fakeEngine) SpecHash(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.schedules[id]
	if !ok {
		return "", schedules.ErrNotFound
	}
	return f.hash(fs), nil
}

func (f *fakeEngine) SetPaused(_ context.Context, id string, paused bool, note string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.schedules[id]
	if !ok {
		return schedules.ErrNotFound
	}
	fs.paused, fs.note = paused, note
	return nil
}

func (f *fakeEngine) DeleteSchedule(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.schedules, id)
	return nil
}

func (f *fakeEngine) StartApproval(_ context.Context, id string, in *schedulesv1.ApprovalInput) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failStart != nil {
		return f.failStart
	}
	if _, ok := f.approvals[id]; !ok {
		f.approvals[id] = &fakeApproval{in: in}
	}
	return nil
}

func (f *fakeEngine) Approve(ctx context.Context, id string, u *schedulesv1.ApproveUpdate) (string, error) {
	return f.decide(ctx, id, schedulesv1.DecisionKind_DECISION_KIND_APPROVE, u.GetDecidedBy(), u.GetNote())
}

func (f *fakeEngine) Deny(ctx context.Context, id string, u *schedulesv1.DenyUpdate) (string, error) {
	return f.decide(ctx, id, schedulesv1.DecisionKind_DECISION_KIND_DENY, u.GetDecidedBy(), u.GetNote())
}

func (f *fakeEngine) decide(ctx context.Context, id string, kind schedulesv1.DecisionKind, by, note string) (string, error) {
	f.mu.Lock()
	a, ok := f.approvals[id]
	closed := !ok || a.decided || a.withdrawn
	f.mu.Unlock()
	if closed {
		return "", fmt.Errorf("%w: approval %s has ended", schedules.ErrDecisionRefused, id)
	}
	res, err := f.client.ApplyDecision(asWorker(ctx), &schedulesv1.ApplyDecisionRequest{
		ScheduleId: a.in.GetScheduleId(), SpecHash: a.in.GetSpecHash(), Kind: kind, DecidedBy: by, Note: note,
	})
	if connect.CodeOf(err) == connect.CodeFailedPrecondition {
		return "", fmt.Errorf("%w: %s", schedules.ErrDecisionRefused, err.(*connect.Error).Message())
	}
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	a.decided = true
	f.mu.Unlock()
	return "schedule " + res.GetSchedule().GetId() + " decided", nil
}

func (f *fakeEngine) WithdrawApproval(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.approvals[id]; ok {
		a.withdrawn = true
	}
	return nil
}

// tamper changes a Temporal Schedule behind the service's back.
func (f *fakeEngine) tamper(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.schedules[id].tampered = true
}

func (f *fakeEngine) schedule(id string) (fakeSchedule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.schedules[id]
	if !ok {
		return fakeSchedule{}, false
	}
	return *fs, true
}

func (f *fakeEngine) approval(id string) (fakeApproval, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.approvals[id]
	if !ok {
		return fakeApproval{}, false
	}
	return *a, true
}

// asWorker acts as the schedules worker: a mesh component.
func asWorker(ctx context.Context) context.Context {
	return mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{
		Subject: "toolmesh-worker-schedules", Agent: "toolmesh-worker-schedules", Roles: []string{mesh.RoleService},
	}})
}

var errUnavailable = errors.New("temporal is unavailable")
