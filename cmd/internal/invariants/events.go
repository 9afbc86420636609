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
