-- The idempotency rule: each idempotency key a sender used, with the digest
-- of its request and what the send answered (the message stored, or the one
-- it was suppressed as a duplicate of), so that a retry answers the same even
-- after the dedup window, and the same key with another request is refused.
-- Keys move here from messages, where a suppressed send had no row to keep
-- its key; those moved have no digest.
CREATE TABLE message_keys (
    from_agent      TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_digest  TEXT NOT NULL DEFAULT '',
    message_id      TEXT NOT NULL,
    duplicate       BOOLEAN NOT NULL DEFAULT FALSE,
    PRIMARY KEY (from_agent, idempotency_key)
);
INSERT INTO message_keys (from_agent, idempotency_key, message_id)
SELECT from_agent, idempotency_key, id FROM messages WHERE idempotency_key IS NOT NULL;
DROP INDEX messages_sender_idempotency;
ALTER TABLE messages DROP COLUMN idempotency_key;
