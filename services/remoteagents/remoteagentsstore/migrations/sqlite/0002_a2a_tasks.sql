-- A2A 1.0: the protocol an invocation spoke, and each inbound task's log of
-- events (what streams replay and pushes send) and its push configs.
ALTER TABLE invocations ADD COLUMN protocol_version TEXT NOT NULL DEFAULT '';
ALTER TABLE invocations ADD COLUMN protocol_binding TEXT NOT NULL DEFAULT '';

-- The seq of a task's last event.
ALTER TABLE inbound ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
CREATE INDEX inbound_sender_agent_updated ON inbound (sender, agent_id, update_ms DESC, task_id DESC);

CREATE TABLE inbound_events (
    task_id    TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    kind       INTEGER NOT NULL,
    status     INTEGER NOT NULL,
    text       TEXT NOT NULL DEFAULT '',
    message_id TEXT NOT NULL DEFAULT '',
    at_ms      INTEGER NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- The tasks from before the log: their delivery, and how they ended.
INSERT INTO inbound_events (task_id, seq, kind, status, at_ms)
    SELECT task_id, 1, 1, 1, create_ms FROM inbound;
INSERT INTO inbound_events (task_id, seq, kind, status, text, message_id, at_ms)
    SELECT task_id, 2, 2, 2, answer, answer_message_id, update_ms FROM inbound WHERE status = 2;
INSERT INTO inbound_events (task_id, seq, kind, status, text, message_id, at_ms)
    SELECT task_id, 3, 1, 2, answer, answer_message_id, update_ms FROM inbound WHERE status = 2;
INSERT INTO inbound_events (task_id, seq, kind, status, at_ms)
    SELECT task_id, 2, 1, 3, update_ms FROM inbound WHERE status = 3;
UPDATE inbound SET version = CASE status WHEN 2 THEN 3 WHEN 3 THEN 2 ELSE 1 END;

CREATE TABLE inbound_push_configs (
    task_id          TEXT NOT NULL,
    config_id        TEXT NOT NULL,
    url              TEXT NOT NULL,
    token            TEXT NOT NULL DEFAULT '',
    auth_scheme      TEXT NOT NULL DEFAULT '',
    auth_credentials TEXT NOT NULL DEFAULT '',
    create_ms        INTEGER NOT NULL,
    delivered_seq    INTEGER NOT NULL,
    PRIMARY KEY (task_id, config_id)
);
