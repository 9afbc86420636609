package workflowrun

import (
	"context"
	"log/slog"
	"time"
)

// An orphan is a call's row whose workflow never started: the call stored
// the row, could not start the workflow (Temporal down or too slow), and
// neither removed the row (Start's remove: the service died in between,
// or the removal failed, or a concurrent retry found the row) nor was
// retried by its caller, who was answered unavailable. Nothing would ever
// end it: it would stay pending, listed, and its deadline would pass with
// no workflow to act on it. Orphans finds such rows and withdraws them
// (ends them as cancelled).

// Defaults of an orphan sweep.
const (
	// OrphanGrace is how old a pending row without a workflow must be
	// before it is withdrawn: longer than any call takes to store its row
	// and start the workflow, so that a row being started is never taken
	// for an orphan.
	OrphanGrace = 2 * time.Minute
	// SweepInterval is the pause between two sweeps.
	SweepInterval = time.Minute
)

// Orphans withdraws the orphans among one kind of call's rows (R).
type Orphans[R any] struct {
	// Event prefixes the log events: <Event>_withdrawn (a warning, once
	// per row), <Event>_sweep_failed, <Event>_sweep_skipped (debug).
	Event string
	Log   *slog.Logger
	Now   func() time.Time
	// Pending lists the rows still waiting for their workflow's outcome.
	Pending func(ctx context.Context) ([]R, error)
	// Created is when a row was stored, ID its id for the log.
	Created func(R) time.Time
	ID      func(R) string
	// NoWorkflow reports whether a row's workflow does not exist
	// (ErrNoWorkflow from a query); an error leaves the row alone.
	NoWorkflow func(ctx context.Context, row R) (bool, error)
	// Withdraw ends the row as cancelled, unless it ended meanwhile (the
	// first outcome wins), and reports whether it changed it.
	Withdraw func(ctx context.Context, row R) (bool, error)
}

// Check withdraws row when it is older than OrphanGrace and its workflow
// does not exist, and reports whether it did. Call it with a row that is
// still pending.
func (o Orphans[R]) Check(ctx context.Context, row R) (bool, error) {
	if o.Now().Sub(o.Created(row)) < OrphanGrace {
		return false, nil
	}
	missing, err := o.NoWorkflow(ctx, row)
	if err != nil || !missing {
		return false, err
	}
	changed, err := o.Withdraw(ctx, row)
	if err != nil {
		return false, err
	}
	if changed {
		o.Log.WarnContext(ctx, o.Event+"_withdrawn", "id", o.ID(row), "created", o.Created(row).UTC().Format(time.RFC3339),
			"reason", "stored, but its workflow never started")
	}
	return changed, nil
}

// Sweep checks every pending row and returns how many it withdrew. A row
// whose workflow cannot be asked about now (Temporal down) is left for
// the next sweep.
func (o Orphans[R]) Sweep(ctx context.Context) (int, error) {
	rows, err := o.Pending(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, row := range rows {
		withdrawn, err := o.Check(ctx, row)
		if err != nil {
			o.Log.DebugContext(ctx, o.Event+"_sweep_skipped", "id", o.ID(row), "error", err)
		}
		if withdrawn {
			n++
		}
	}
	return n, nil
}

// Run sweeps every interval until ctx ends. Run it beside the server.
func (o Orphans[R]) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := o.Sweep(ctx); err != nil && ctx.Err() == nil {
				o.Log.WarnContext(ctx, o.Event+"_sweep_failed", "error", err)
			}
		}
	}
}

// AllPages reads every page of a list (page: one page of at most limit
// rows from offset, and the total) — the rows a sweep looks at.
func AllPages[R any](ctx context.Context, page func(ctx context.Context, offset, limit int) ([]R, int, error)) ([]R, error) {
	const limit = 100
	var all []R
	for offset := 0; ; offset += limit {
		rows, total, err := page(ctx, offset, limit)
		if err != nil {
			return nil, err
		}
		all = append(all, rows...)
		if len(rows) < limit || offset+limit >= total {
			return all, nil
		}
	}
}
