-- Changes (schedules_update): each one is a revision of the schedule, which
-- the owner approves anew. A change's idempotency key and request digest
-- are kept per calling agent, so a retried change applies once.
ALTER TABLE schedules ADD COLUMN revision BIGINT NOT NULL DEFAULT 0;
CREATE TABLE schedule_updates (
    schedule_id     TEXT NOT NULL,
    revision        BIGINT NOT NULL,
    agent_id        TEXT NOT NULL,
    idempotency_key TEXT,
    request_digest  TEXT NOT NULL DEFAULT '',
    create_ms       BIGINT NOT NULL,
    PRIMARY KEY (schedule_id, revision)
);
CREATE UNIQUE INDEX schedule_updates_agent_idempotency ON schedule_updates (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
