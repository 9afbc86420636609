CREATE TABLE agents (
    id              TEXT PRIMARY KEY,
    display_name    TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    status          INTEGER NOT NULL,
    status_reason   TEXT NOT NULL DEFAULT '',
    registered_by   TEXT NOT NULL,
    create_ms       INTEGER NOT NULL,
    update_ms       INTEGER NOT NULL,
    -- The key of the call that registered the agent, so a retried
    -- registration returns the agent instead of a conflict.
    idempotency_key TEXT
);
CREATE INDEX agents_status ON agents (status, id);
