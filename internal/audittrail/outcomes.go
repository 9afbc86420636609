package audittrail

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolmesh/toolmesh/internal/ids"
	"github.com/toolmesh/toolmesh/internal/mesh"
	auditv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/audit/v1/auditv1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// OutcomeLog sends how every tool call ended to the audit service
// (RecordOutcomes), in the background: Add never waits for the service.
// Outcomes are sent in batches of at most OutcomeBatch: every OutcomeFlush
// what is queued, and in between each batch as soon as it is full. What
// arrives while a batch is being sent waits for the next of those, so a
// steady stream of calls costs the audit service a few commits a second,
// not one per handful of calls. A batch that fails with a transient error
// is sent again (the service records each outcome id once). At most
// OutcomeBuffer wait to be sent: past that, and for outcomes still unsent
// when the edge is killed, outcomes are dropped — counted in the log, never
// blocking a call. Close sends what is left.
type OutcomeLog struct {
	client auditv1connect.AuditServiceClient
	log    *slog.Logger

	mu      sync.Mutex
	pending []*auditv1.CallOutcome
	dropped int
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// The outcome log's bounds.
const (
	OutcomeBatch  = 500
	OutcomeFlush  = time.Second
	OutcomeBuffer = 10_000
)

// NewOutcomeLog starts an outcome log over client, which must carry the
// mesh identity of each call's context (mesh.NewClientInterceptor).
func NewOutcomeLog(client auditv1connect.AuditServiceClient, log *slog.Logger) *OutcomeLog {
	l := newOutcomeLog(client, log)
	go l.run()
	return l
}

// newOutcomeLog returns an outcome log that sends nothing until run.
func newOutcomeLog(client auditv1connect.AuditServiceClient, log *slog.Logger) *OutcomeLog {
	return &OutcomeLog{client: client, log: log, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

// Outcome is how one tool call ended.
type Outcome struct {
	Agent, Subject, Tool string
	Kind                 toolv1.Kind
	// Code is "ok" for success, else the envelope's domain code.
	Code string
	Took time.Duration
	// Accomplishment names what a successful call achieved ("" for none;
	// toolcatalog.Tool.Accomplished).
	Accomplishment string
}

// Add queues the outcome of a call that ended now, under a fresh id.
func (l *OutcomeLog) Add(out Outcome) {
	o := &auditv1.CallOutcome{Id: ids.New("out"), Time: timestamppb.Now(), Agent: out.Agent, Subject: out.Subject,
		Tool: out.Tool, Kind: out.Kind, DomainCode: out.Code, DurationMs: out.Took.Milliseconds(),
		Accomplishment: out.Accomplishment}
	l.mu.Lock()
	if len(l.pending) >= OutcomeBuffer {
		l.dropped++
		l.mu.Unlock()
		return
	}
	l.pending = append(l.pending, o)
	full := len(l.pending) >= OutcomeBatch
	l.mu.Unlock()
	if full {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// Close sends the outcomes still queued, within ctx, and stops the log.
func (l *OutcomeLog) Close(ctx context.Context) {
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
	case <-ctx.Done():
		return
	}
	l.flush(ctx, math.MaxInt)
}

func (l *OutcomeLog) run() {
	defer close(l.done)
	tick := time.NewTicker(OutcomeFlush)
	defer tick.Stop()
	for {
		due := 0
		select {
		case <-l.stop:
			return
		case <-tick.C:
			due = l.queued()
		case <-l.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), RecordTimeout)
		l.flush(ctx, due)
		cancel()
	}
}

// queued is how many outcomes wait to be sent.
func (l *OutcomeLog) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// flush sends, in batches, the first due outcomes queued, then every full
// batch queued. It stops at a transient failure (the batch stays queued).
func (l *OutcomeLog) flush(ctx context.Context, due int) {
	for {
		n, ok := l.send(ctx, due)
		if !ok {
			return
		}
		due -= n
	}
}

// send sends one batch, if due > 0 or a full batch is queued; it reports
// how many outcomes it took off the queue and whether to go on.
func (l *OutcomeLog) send(ctx context.Context, due int) (int, bool) {
	l.mu.Lock()
	n := min(len(l.pending), OutcomeBatch)
	if due <= 0 && n < OutcomeBatch {
		n = 0
	}
	batch := l.pending[:n:n]
	dropped := l.dropped
	l.dropped = 0
	l.mu.Unlock()
	if dropped > 0 {
		l.log.WarnContext(ctx, "edge.outcomes_dropped", "outcomes", dropped, "message", "the audit service did not keep up; these calls' outcomes are not counted")
	}
	if n == 0 {
		return 0, false
	}
	ctx = mesh.WithCall(ctx, mesh.Call{Caller: mesh.Caller{Subject: EdgeSubject, Agent: EdgeSubject, Roles: []string{mesh.RoleService}}})
	_, err := l.client.RecordOutcomes(ctx, &auditv1.RecordOutcomesRequest{Outcomes: batch})
	if err != nil && transient(err) {
		l.log.InfoContext(ctx, "edge.outcomes_deferred", "outcomes", n, "error", err)
		return 0, false // kept: sent again at the next flush
	}
	l.mu.Lock()
	l.pending = l.pending[n:]
	l.mu.Unlock()
	if err != nil {
		l.log.WarnContext(ctx, "edge.outcomes_refused", "outcomes", n, "error", err)
	}
	return n, true
}
