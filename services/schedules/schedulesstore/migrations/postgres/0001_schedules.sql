CREATE TABLE schedules (
    id                   TEXT PRIMARY KEY,
    agent_id             TEXT NOT NULL,
    description          TEXT NOT NULL DEFAULT '',
    cron                 TEXT NOT NULL DEFAULT '',
    interval_seconds     BIGINT NOT NULL DEFAULT 0,
    timezone             TEXT NOT NULL,
    tool                 TEXT NOT NULL,
    -- The action's arguments as protobuf JSON (a google.protobuf.Struct).
    arguments            TEXT NOT NULL,
    status               BIGINT NOT NULL,
    spec_hash            TEXT NOT NULL DEFAULT '',
    approval_workflow_id TEXT NOT NULL DEFAULT '',
    temporal_schedule_id TEXT NOT NULL,
    decided_by           TEXT NOT NULL DEFAULT '',
    decision_note        TEXT NOT NULL DEFAULT '',
    decide_ms            BIGINT NOT NULL DEFAULT 0,
    paused_by            TEXT NOT NULL DEFAULT '',
    depth                BIGINT NOT NULL DEFAULT 0,
    create_ms            BIGINT NOT NULL,
    update_ms            BIGINT NOT NULL,
    idempotency_key      TEXT
);
CREATE INDEX schedules_agent_created ON schedules (agent_id, create_ms DESC, id DESC);
CREATE INDEX schedules_created ON schedules (create_ms DESC, id DESC);
CREATE UNIQUE INDEX schedules_agent_idempotency ON schedules (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- One row per run: the run id is the Temporal workflow id of the run, so a
-- run reported twice is still one row.
CREATE TABLE schedule_executions (
    run_id       TEXT PRIMARY KEY,
    schedule_id  TEXT NOT NULL,
    scheduled_ms BIGINT NOT NULL,
    start_ms     BIGINT NOT NULL DEFAULT 0,
    end_ms       BIGINT NOT NULL DEFAULT 0,
    status       BIGINT NOT NULL,
    domain_code  TEXT NOT NULL DEFAULT '',
    -- The tool's result envelope as JSON; '' while the run runs.
    result       TEXT NOT NULL DEFAULT '',
    attempts     BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX schedule_executions_due ON schedule_executions (schedule_id, scheduled_ms DESC, run_id DESC);
