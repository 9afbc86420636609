-- The idempotency rule: an ask's id comes from the call's idempotency key,
-- and the ask keeps the digest of the request that made it, so a retry (same
-- key, same question) gets the ask and the same key with another question is
-- refused. Asks stored before have no digest.
ALTER TABLE asks ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
