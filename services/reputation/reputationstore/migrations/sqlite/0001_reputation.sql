-- The attestation each agent published last (body: the Attestation message,
-- binary protobuf).
CREATE TABLE attestations (
    agent_id  TEXT PRIMARY KEY,
    issued_ms INTEGER NOT NULL,
    body      BLOB NOT NULL
);
CREATE INDEX attestations_issued ON attestations (issued_ms DESC, agent_id);

-- Each keyed publish and the attestation it answered, so a retry answers it
-- again.
CREATE TABLE attestation_calls (
    agent_id        TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_digest  TEXT NOT NULL,
    body            BLOB NOT NULL,
    PRIMARY KEY (agent_id, idempotency_key)
);
