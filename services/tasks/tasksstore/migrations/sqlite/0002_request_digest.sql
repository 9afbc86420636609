-- The idempotency rule: a task keeps the digest of the request that created
-- it beside its idempotency key, so a retry (same key, same request) gets the
-- task and the same key with another request is refused. Tasks stored
-- before have no digest.
ALTER TABLE tasks ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
