CREATE TABLE messages (
    id              TEXT PRIMARY KEY,
    thread_id       TEXT NOT NULL,
    from_agent      TEXT NOT NULL,
    to_agent        TEXT NOT NULL,
    body            TEXT NOT NULL,
    create_ms       BIGINT NOT NULL,
    idempotency_key TEXT
);
CREATE INDEX messages_inbox ON messages (to_agent, create_ms DESC, id DESC);
CREATE INDEX messages_thread ON messages (thread_id, create_ms DESC, id DESC);
CREATE UNIQUE INDEX messages_sender_idempotency ON messages (from_agent, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- The last stored message per sender, recipient and digest of the message's
-- first characters. Send claims the row with one upsert that succeeds only
-- when the last message is older than the dedup window, so two identical
-- concurrent sends cannot both be stored.
CREATE TABLE message_dedup (
    from_agent TEXT NOT NULL,
    to_agent   TEXT NOT NULL,
    dedup_key  TEXT NOT NULL,
    message_id TEXT NOT NULL,
    create_ms  BIGINT NOT NULL,
    PRIMARY KEY (from_agent, to_agent, dedup_key)
);
