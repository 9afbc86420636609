package invariants

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/toolmesh/toolmesh/internal/chaoslog"
	"github.com/toolmesh/toolmesh/internal/sqldb"
)

// keysOnce: no idempotency key (or grant reference) has two side effects,
// and no key was claimed for a message that is not there.
func keysOnce(ctx context.Context, in Input, t *tally) error {
	type dup struct {
		db            *sqldb.DB
		what, count   string
		query, detail string
	}
	checks := []dup{
		{in.Tasks, "task", `SELECT COUNT(*) FROM tasks WHERE idempotency_key IS NOT NULL`,
			`SELECT agent_id || ' ' || idempotency_key, COUNT(*), MAX(create_ms) FROM tasks WHERE idempotency_key IS NOT NULL
			GROUP BY agent_id, idempotency_key HAVING COUNT(*) > 1`, "tasks with this agent and idempotency key"},
		{in.Credits, "ledger call", `SELECT COUNT(*) FROM credit_ledger WHERE call_id IS NOT NULL`,
			`SELECT actor || ' ' || call_id, COUNT(*), MAX(create_ms) FROM credit_ledger WHERE call_id IS NOT NULL
			GROUP BY actor, call_id HAVING COUNT(*) > 1`, "ledger entries with this actor and idempotency key"},
		{in.Credits, "grant reference", `SELECT COUNT(*) FROM credit_ledger WHERE kind = 1`,
			`SELECT reference, COUNT(*), MAX(create_ms) FROM credit_ledger WHERE kind = 1
			GROUP BY reference HAVING COUNT(*) > 1`, "grants with this reference"},
		{in.RemoteAgents, "A2A message", `SELECT COUNT(*) FROM inbound`,
			`SELECT sender || ' ' || a2a_message_id, COUNT(*), MAX(create_ms) FROM inbound
			GROUP BY sender, a2a_message_id HAVING COUNT(*) > 1`, "A2A tasks opened by this sender's message id"},
		{in.Messages, "message key", `SELECT COUNT(*) FROM message_keys`,
			`SELECT k.from_agent || ' ' || k.idempotency_key, 0, 0 FROM message_keys k
			WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = k.message_id)`, "messages for a claimed key (the key names a message that is not there)"},
	}
	for _, c := range checks {
		if c.db == nil {
			continue
		}
		var n int
		if err := c.db.QueryRow(ctx, c.count).Scan(&n); err != nil {
			return fmt.Errorf("count %ss: %w", c.what, err)
		}
		t.items += n
		rows, err := c.db.Query(ctx, c.query)
		if err != nil {
			return fmt.Errorf("find %ss twice: %w", c.what, err)
		}
		for rows.Next() {
			var key string
			var count, last int64
			if err := rows.Scan(&key, &count, &last); err != nil {
				rows.Close()
				return err
			}
			t.broke(key, msTime(last), fmt.Sprintf("%d %s", count, c.detail))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// ackedOnce: every write the workload saw acknowledged is there, once, and
// is the one its idempotency key names.
func ackedOnce(ctx context.Context, in Input, t *tally) error {
	for _, a := range in.Acked {
		var checks []lookup
		switch a.Domain {
		case "tasks":
			checks = []lookup{{in.Tasks, "tasks with this id", `SELECT COUNT(*) FROM tasks WHERE id = ?`, []any{a.ID}, 1}}
			if a.Key != "" {
				checks = append(checks, lookup{in.Tasks, "tasks with this id, agent and idempotency key",
					`SELECT COUNT(*) FROM tasks WHERE id = ? AND agent_id = ? AND idempotency_key = ?`, []any{a.ID, a.Agent, a.Key}, 1})
			}
		case "messages":
			checks = []lookup{{in.Messages, "messages with this id", `SELECT COUNT(*) FROM messages WHERE id = ?`, []any{a.ID}, 1}}
			if a.Key != "" {
				checks = append(checks, lookup{in.Messages, "keys of this sender naming this message",
					`SELECT COUNT(*) FROM message_keys WHERE from_agent = ? AND idempotency_key = ? AND message_id = ?`, []any{a.Agent, a.Key, a.ID}, 1})
			}
		case "memory":
			checks = []lookup{{in.Memory, "memories with this agent and key",
				`SELECT COUNT(*) FROM memories WHERE agent_id = ? AND memory_key = ?`, []any{a.Agent, a.Key}, 1}}
		case "credits":
			checks = []lookup{{in.Credits, "ledger entries with this reference", `SELECT COUNT(*) FROM credit_ledger WHERE reference = ?`, []any{a.Key}, 1}}
			if a.ID != "" {
				checks = append(checks, lookup{in.Credits, "ledger entries with this id and reference",
					`SELECT COUNT(*) FROM credit_ledger WHERE id = ? AND reference = ?`, []any{a.ID, a.Key}, 1})
			}
		case "owner":
			checks = []lookup{{in.Owner, "asks with this id", `SELECT COUNT(*) FROM asks WHERE id = ?`, []any{a.ID}, 1}}
		case "workflows":
			checks = []lookup{{in.Workflows, "runs with this id", `SELECT COUNT(*) FROM runs WHERE id = ?`, []any{a.ID}, 1}}
		case "a2a":
			// An A2A task a sender's message opened: Agent is the sender
			// (a2a-<subject>), Key its message id.
			checks = []lookup{{in.RemoteAgents, "A2A tasks with this id", `SELECT COUNT(*) FROM inbound WHERE task_id = ?`, []any{a.ID}, 1},
				{in.RemoteAgents, "A2A tasks with this id, sender and message id",
					`SELECT COUNT(*) FROM inbound WHERE task_id = ? AND sender = ? AND a2a_message_id = ?`, []any{a.ID, a.Agent, a.Key}, 1}}
		default:
			return fmt.Errorf("acknowledged write of an unknown domain %q (id %q, key %q)", a.Domain, a.ID, a.Key)
		}
		if checks[0].db == nil {
			continue
		}
		t.items++
		for _, c := range checks {
			n, err := c.count(ctx)
			if err != nil {
				return fmt.Errorf("%s %s: %w", a.Domain, c.what, err)
			}
			if n != c.want {
				t.broke(ackKey(a), a.At, fmt.Sprintf("%s: %d, want %d", c.what, n, c.want),
					fmt.Sprintf("acknowledged to the workload at %s", a.At.UTC().Format(time.RFC3339Nano)))
				break
			}
		}
	}
	return nil
}

// lookup is one count an acknowledged write must have.
type lookup struct {
	db   *sqldb.DB
	what string
	q    string
	args []any
	want int
}

func (l lookup) count(ctx context.Context) (int, error) {
	var n int
	err := l.db.QueryRow(ctx, l.q, l.args...).Scan(&n)
	if err == sql.ErrNoRows {
		return 0, nil
	}
	return n, err
}

func ackKey(a chaoslog.Ack) string {
	s := a.Domain
	if a.ID != "" {
		s += " " + a.ID
	}
	if a.Key != "" {
		s += " key " + a.Key
	}
	return s
}

// asksEnded: no ask is pending past its expiry: a pending ask's workflow
// expires it, so one still pending then was orphaned.
func asksEnded(ctx context.Context, in Input, t *tally) error {
	if err := in.Owner.QueryRow(ctx, `SELECT COUNT(*) FROM asks`).Scan(&t.items); err != nil {
		return err
	}
	rows, err := in.Owner.Query(ctx, `SELECT id, agent_id, status, create_ms, expire_ms, workflow_id FROM asks
		WHERE status NOT IN (2, 3, 4) AND (status <> 1 OR expire_ms <= ?) ORDER BY create_ms`, in.Now.UnixMilli())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, agent, workflow string
		var status, created, expires int64
		if err := rows.Scan(&id, &agent, &status, &created, &expires, &workflow); err != nil {
			return err
		}
		t.broke(id, msTime(created), fmt.Sprintf("asks: agent %s status %d, created %s, expires %s (checked at %s), workflow %s",
			agent, status, stamp(created), stamp(expires), in.Now.UTC().Format(time.RFC3339), workflow))
	}
	return rows.Err()
}

// runsEnded: no workflow run is running or suspended past its deadline.
func runsEnded(ctx context.Context, in Input, t *tally) error {
	if err := in.Workflows.QueryRow(ctx, `SELECT COUNT(*) FROM runs`).Scan(&t.items); err != nil {
		return err
	}
	rows, err := in.Workflows.Query(ctx, `SELECT id, agent_id, workflow_name, status, create_ms, deadline_ms, temporal_workflow_id FROM runs
		WHERE status NOT IN (2, 3, 5) AND (status NOT IN (1, 4) OR deadline_ms <= ?) ORDER BY create_ms`, in.Now.UnixMilli())
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, agent, name, workflow string
		var status, created, deadline int64
		if err := rows.Scan(&id, &agent, &name, &status, &created, &deadline, &workflow); err != nil {
			return err
		}
		t.broke(id, msTime(created), fmt.Sprintf("runs: %s of agent %s status %d, created %s, deadline %s (checked at %s), Temporal workflow %s",
			name, agent, status, stamp(created), stamp(deadline), in.Now.UTC().Format(time.RFC3339), workflow))
	}
	return rows.Err()
}

func stamp(ms int64) string { return msTime(ms).UTC().Format(time.RFC3339Nano) }
