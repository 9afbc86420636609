CREATE TABLE tasks (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    description     TEXT NOT NULL,
    status          BIGINT NOT NULL,
    priority        BIGINT NOT NULL,
    result          TEXT NOT NULL DEFAULT '',
    cancel_reason   TEXT NOT NULL DEFAULT '',
    create_ms       BIGINT NOT NULL,
    update_ms       BIGINT NOT NULL,
    idempotency_key TEXT
);
CREATE INDEX tasks_agent_created ON tasks (agent_id, create_ms DESC, id DESC);
CREATE UNIQUE INDEX tasks_agent_idempotency ON tasks (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- One row per agent and UTC day; the row lock serialises concurrent creates
-- of one agent so the cap cannot be overshot.
CREATE TABLE task_daily_counts (
    agent_id TEXT NOT NULL,
    day      TEXT NOT NULL,
    created  BIGINT NOT NULL,
    PRIMARY KEY (agent_id, day)
);
