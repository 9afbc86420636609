CREATE TABLE workflows (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    latest_version  INTEGER NOT NULL,
    create_ms       INTEGER NOT NULL,
    update_ms       INTEGER NOT NULL,
    delete_ms       INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    request_digest  TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX workflows_agent_name ON workflows (agent_id, name) WHERE delete_ms = 0;
CREATE UNIQUE INDEX workflows_agent_idempotency ON workflows (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX workflows_agent_created ON workflows (agent_id, create_ms DESC, id DESC);

-- Every version of every workflow, deleted ones included: runs name the
-- version they ran.
CREATE TABLE workflow_versions (
    workflow_id     TEXT NOT NULL REFERENCES workflows (id),
    version         INTEGER NOT NULL,
    definition_json TEXT NOT NULL,
    create_ms       INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, version)
);

CREATE TABLE runs (
    id                   TEXT PRIMARY KEY,
    workflow_id          TEXT NOT NULL REFERENCES workflows (id),
    version              INTEGER NOT NULL,
    workflow_name        TEXT NOT NULL,
    agent_id             TEXT NOT NULL,
    status               INTEGER NOT NULL,
    input_json           TEXT NOT NULL DEFAULT '{}',
    state_json           TEXT NOT NULL DEFAULT '{}',
    create_ms            INTEGER NOT NULL,
    update_ms            INTEGER NOT NULL,
    end_ms               INTEGER NOT NULL DEFAULT 0,
    deadline_ms          INTEGER NOT NULL,
    temporal_workflow_id TEXT NOT NULL,
    request_digest       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_agent_created ON runs (agent_id, create_ms DESC, id DESC);
CREATE INDEX runs_workflow_created ON runs (workflow_id, create_ms DESC, id DESC);
