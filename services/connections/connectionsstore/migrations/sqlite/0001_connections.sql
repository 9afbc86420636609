-- One row per agent and provider: the upstream account the agent acts as.
-- access_sealed and refresh_sealed are envelope records (internal/seal)
-- bound to the row's id, wrapped by the key-encryption key kek_id; both are
-- NULL once the connection is revoked. generation counts the changes of the
-- tokens, and lease_until_ms is the refresh lease: one replica refreshes,
-- the others wait for the generation to move.
CREATE TABLE connections (
    id             TEXT PRIMARY KEY,
    agent          TEXT NOT NULL,
    provider       INTEGER NOT NULL,
    account        TEXT NOT NULL,
    scopes         TEXT NOT NULL DEFAULT '[]',
    status         INTEGER NOT NULL,
    access_sealed  BLOB,
    refresh_sealed BLOB,
    kek_id         TEXT NOT NULL DEFAULT '',
    generation     INTEGER NOT NULL DEFAULT 0,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    create_ms      INTEGER NOT NULL,
    update_ms      INTEGER NOT NULL,
    use_ms         INTEGER NOT NULL DEFAULT 0,
    expire_ms      INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX connections_agent_provider ON connections (agent, provider);
CREATE INDEX connections_kek ON connections (kek_id);
