-- The idempotency rule: an agent keeps the digest of the request that
-- registered it beside the call's idempotency key, and a key names one
-- registration per registering subject: a retry (same key, same request)
-- gets the agent, the same key with another request is refused. Agents
-- stored before have no digest; of two that share a key, the older keeps it.
ALTER TABLE agents ADD COLUMN request_digest TEXT NOT NULL DEFAULT '';
UPDATE agents SET idempotency_key = NULL
WHERE idempotency_key IS NOT NULL AND EXISTS (
    SELECT 1 FROM agents older
    WHERE older.registered_by = agents.registered_by AND older.idempotency_key = agents.idempotency_key
      AND (older.create_ms < agents.create_ms OR (older.create_ms = agents.create_ms AND older.id < agents.id)));
CREATE UNIQUE INDEX agents_registrar_idempotency ON agents (registered_by, idempotency_key) WHERE idempotency_key IS NOT NULL;
