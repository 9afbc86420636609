CREATE TABLE agents (
    id              TEXT PRIMARY KEY,
    display_name    TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    status          BIGINT NOT NULL,
    status_reason   TEXT NOT NULL DEFAULT '',
    registered_by   TEXT NOT NULL,
    create_ms       BIGINT NOT NULL,
    update_ms       BIGINT NOT NULL,
    -- The key of the call that registered the agent, so a retried
    -- registration returns the agent instead of a conflict.
    idempotency_key TEXT
);
CREATE INDEX agents_status ON agents (status, id);
