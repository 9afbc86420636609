-- The idempotency rule: a schedule keeps the digest of the request that
-- created it beside its idempotency key, so a retry (same key, same request)
-- gets the schedule and the same key with another request is refused.
-- Schedules stored before have no digest.
ALTER TABLE schedules ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
