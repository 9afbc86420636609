package invariants

import (
	"context"
	"fmt"

	"github.com/toolmesh/toolmesh/internal/outbox"
	"github.com/toolmesh/toolmesh/internal/sqldb"
	ownerv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/owner/v1"
	tasksv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tasks/v1"
	"github.com/toolmesh/toolmesh/services/owner"
	"github.com/toolmesh/toolmesh/services/tasks"
)

// eventsRecorded: every change the owner and tasks databases hold has its
// event, still in the domain's outbox or recorded in the event log — an
// ask's creation and its ending, a work task's current status (past
// pending). Changes older than the log's retention may have lost theirs to
// pruning; a check runs on a fresh mesh's databases.
func eventsRecorded(ctx context.Context, in Input, t *tally) error {
	type change struct{ event, what string }
	check := func(db *sqldb.DB, changes []change) error {
		for _, c := range changes {
			t.items++
			var n int
			if err := db.QueryRow(ctx, `SELECT COUNT(*) FROM outbox WHERE event_id = ?`, c.event).Scan(&n); err != nil {
				return fmt.Errorf("read outbox: %w", err)
			}
			if n > 0 {
				continue
			}
			if err := in.EventLog.QueryRow(ctx, `SELECT COUNT(*) FROM events WHERE event_id = ?`, c.event).Scan(&n); err != nil {
				return fmt.Errorf("read the event log: %w", err)
			}
			if n == 0 {
				t.broke(c.event, msTime(0), c.what+": its event is neither in the outbox nor in the event log")
			}
		}
		return nil
	}
	if in.Owner != nil {
		var changes []change
		err := rowsOf(ctx, in.Owner, `SELECT id, status FROM asks ORDER BY create_ms`, func(s sqldb.Scanner) error {
			var id string
			var status int64
			if err := s.Scan(&id, &status); err != nil {
				return err
			}
			changes = append(changes, change{outbox.ID(owner.EventAskCreated, id), "ask " + id + " created"})
			if name := owner.AskEventName(ownerv1.AskStatus(status)); name != "" {
				changes = append(changes, change{outbox.ID(name, id), "ask " + id + " " + name})
			}
			return nil
		})
		if err != nil {
			return err
		}
		if err := check(in.Owner, changes); err != nil {
			return err
		}
	}
	if in.Tasks != nil {
		var changes []change
		err := rowsOf(ctx, in.Tasks, `SELECT id, status FROM tasks WHERE status <> ? ORDER BY create_ms`, func(s sqldb.Scanner) error {
			var id string
			var status int64
			if err := s.Scan(&id, &status); err != nil {
				return err
			}
			st := tasksv1.TaskStatus(status).String()
			changes = append(changes, change{outbox.ID(tasks.EventStatusChanged, id, st), "work task " + id + " " + st})
			return nil
		}, int32(tasksv1.TaskStatus_TASK_STATUS_PENDING))
		if err != nil {
			return err
		}
		if err := check(in.Tasks, changes); err != nil {
			return err
		}
	}
	return nil
}

// webhooksOwed: each webhook subscription's cursor lies within the event
// log (no event can have been skipped that was not yet recorded), and each
// delivery its receiver acknowledged above the cursor is an event of the
// subscription's type still in the log (or pruned); one at or below the
// cursor says nothing the cursor does not. Whether the receiver
// got each event is the chaos run's subscriber's to check: the databases
// hold the mesh's side.
func webhooksOwed(ctx context.Context, in Input, t *tally) error {
	var newest, pruned int64
	if err := in.EventLog.QueryRow(ctx, `SELECT COALESCE(MAX(seq), 0) FROM events`).Scan(&newest); err != nil {
		return fmt.Errorf("read the event log: %w", err)
	}
	if err := in.EventLog.QueryRow(ctx, `SELECT pruned_through FROM events_log WHERE id = 1`).Scan(&pruned); err != nil {
		return fmt.Errorf("read the event log's retention: %w", err)
	}
	end := max(newest, pruned)
	type sub struct {
		name   string
		cursor int64
	}
	subs := map[string]sub{}
	err := rowsOf(ctx, in.EventLog, `SELECT id, name, cursor, create_ms FROM subscriptions ORDER BY create_ms`, func(s sqldb.Scanner) error {
		var id string
		var x sub
		var created int64
		if err := s.Scan(&id, &x.name, &x.cursor, &created); err != nil {
			return err
		}
		t.items++
		subs[id] = x
		if x.cursor > end {
			t.broke(id, msTime(created), fmt.Sprintf("subscription %s (%s): its cursor %d is past the event log's last event %d", id, x.name, x.cursor, end))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("read subscriptions: %w", err)
	}
	return rowsOf(ctx, in.EventLog, `SELECT d.subscription_id, d.seq, COALESCE(e.name, '') FROM subscription_deliveries d
		LEFT JOIN events e ON e.seq = d.seq ORDER BY d.subscription_id, d.seq`, func(s sqldb.Scanner) error {
		var id, name string
		var seq int64
		if err := s.Scan(&id, &seq, &name); err != nil {
			return err
		}
		t.items++
		x, ok := subs[id]
		switch {
		case !ok:
			t.broke(id, msTime(0), fmt.Sprintf("a delivery of event %d acknowledged for subscription %s, which does not exist", seq, id))
		case seq <= x.cursor:
			// Left by an attempt that outlived its turn (a frozen worker
			// thawed): the cursor tells already.
		case name == "" && seq > pruned:
			t.broke(id, msTime(0), fmt.Sprintf("subscription %s: acknowledged event %d is not in the event log", id, seq))
		case name != "" && name != x.name:
			t.broke(id, msTime(0), fmt.Sprintf("subscription %s (%s): acknowledged event %d is a %s", id, x.name, seq, name))
		}
		return nil
	})
}

// rowsOf runs query on db and hands each row to scan.
func rowsOf(ctx context.Context, db *sqldb.DB, query string, scan func(sqldb.Scanner) error, args ...any) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
