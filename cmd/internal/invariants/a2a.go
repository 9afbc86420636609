package invariants

import (
	"context"
	"fmt"
)

// a2aLogs: every A2A task the mesh serves has its whole event log — one
// event for each seq from 1 to the task's version, none missing, none
// past it — and its last status event says the status the task has. A
// stream or a resubscription replays the log, so a gap is an event no
// client ever sees, and an event past the version one no snapshot shows.
func a2aLogs(ctx context.Context, in Input, t *tally) error {
	if err := in.RemoteAgents.QueryRow(ctx, `SELECT COUNT(*) FROM inbound`).Scan(&t.items); err != nil {
		return err
	}
	rows, err := in.RemoteAgents.Query(ctx, `SELECT i.task_id, i.version, i.status, i.update_ms, COUNT(e.seq), COALESCE(MIN(e.seq), 0), COALESCE(MAX(e.seq), 0),
		COALESCE((SELECT l.status FROM inbound_events l WHERE l.task_id = i.task_id AND l.kind = 1 ORDER BY l.seq DESC LIMIT 1), -1)
		FROM inbound i LEFT JOIN inbound_events e ON e.task_id = i.task_id
		GROUP BY i.task_id, i.version, i.status, i.update_ms ORDER BY i.update_ms`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var version, status, updated, count, first, last, lastStatus int64
		if err := rows.Scan(&id, &version, &status, &updated, &count, &first, &last, &lastStatus); err != nil {
			return err
		}
		if count == version && first == 1 && last == version && lastStatus == status {
			continue
		}
		t.broke("a2a task "+id, msTime(updated),
			fmt.Sprintf("inbound: status %d, version %d, updated %s", status, version, stamp(updated)),
			fmt.Sprintf("inbound_events: %d events, seq %d to %d, last status event says %d", count, first, last, lastStatus))
	}
	return rows.Err()
}
