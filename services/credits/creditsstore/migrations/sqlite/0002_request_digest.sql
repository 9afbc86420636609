-- The idempotency rule: each entry keeps the digest of the request that made
-- it and the idempotency key of that call, so a retry (same reference or
-- same key, same request) gets the first entry and anything else with either
-- key is refused. Entries stored before have no digest.
ALTER TABLE credit_ledger ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
ALTER TABLE credit_ledger ADD COLUMN call_id TEXT;
CREATE UNIQUE INDEX credit_ledger_call ON credit_ledger (actor, call_id) WHERE call_id IS NOT NULL;
