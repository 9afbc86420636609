CREATE TABLE projects (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    path            TEXT NOT NULL DEFAULT '',
    git_url         TEXT NOT NULL DEFAULT '',
    git_ref         TEXT NOT NULL DEFAULT '',
    status          BIGINT NOT NULL,
    create_ms       BIGINT NOT NULL,
    update_ms       BIGINT NOT NULL,
    archive_ms      BIGINT NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    request_digest  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX projects_agent_name ON projects (agent_id, name, id);
CREATE UNIQUE INDEX projects_agent_idempotency ON projects (agent_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- A name is a key among the agent's active projects (status 1): creating
-- one again is a retry, and archiving frees the name.
CREATE UNIQUE INDEX projects_agent_active_name ON projects (agent_id, name) WHERE status = 1;

-- The index of a project's code: one row per source file, and its
-- declarations. size and mtime_ns recognise an unchanged file without
-- reading it; hash recognises one whose content did not change.
CREATE TABLE project_files (
    project_id TEXT NOT NULL,
    path       TEXT NOT NULL,
    hash       TEXT NOT NULL,
    size       BIGINT NOT NULL,
    mtime_ns   BIGINT NOT NULL,
    language   BIGINT NOT NULL,
    lines      BIGINT NOT NULL,
    todos      BIGINT NOT NULL,
    fixmes     BIGINT NOT NULL,
    test       BIGINT NOT NULL,
    symbols    BIGINT NOT NULL,
    PRIMARY KEY (project_id, path)
);

CREATE TABLE project_symbols (
    project_id TEXT NOT NULL,
    path       TEXT NOT NULL,
    name       TEXT NOT NULL,
    name_lower TEXT NOT NULL,
    kind       BIGINT NOT NULL,
    language   BIGINT NOT NULL,
    line       BIGINT NOT NULL,
    col        BIGINT NOT NULL,
    end_line   BIGINT NOT NULL,
    container  TEXT NOT NULL,
    signature  TEXT NOT NULL
);
CREATE INDEX project_symbols_file ON project_symbols (project_id, path);
CREATE INDEX project_symbols_name ON project_symbols (project_id, name_lower);

-- Health snapshots, one per (project, key): the health workflow's retried
-- activity takes one.
CREATE TABLE project_health (
    project_id   TEXT NOT NULL,
    snapshot_key TEXT NOT NULL,
    take_ms      BIGINT NOT NULL,
    files        BIGINT NOT NULL,
    lines        BIGINT NOT NULL,
    symbols      BIGINT NOT NULL,
    todos        BIGINT NOT NULL,
    fixmes       BIGINT NOT NULL,
    test_files   BIGINT NOT NULL,
    vet_findings BIGINT,
    vet_missing  TEXT NOT NULL DEFAULT '',
    truncated    BIGINT NOT NULL,
    PRIMARY KEY (project_id, snapshot_key)
);
CREATE INDEX project_health_time ON project_health (project_id, take_ms);
