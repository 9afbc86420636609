CREATE TABLE projects (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL DEFAULT '',
    path            TEXT NOT NULL DEFAULT '',
    git_url         TEXT NOT NULL DEFAULT '',
    git_ref         TEXT NOT NULL DEFAULT '',
    status          INTEGER NOT NULL,
    create_ms       INTEGER NOT NULL,
    update_ms       INTEGER NOT NULL,
    archive_ms      INTEGER NOT NULL DEFAULT 0,
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
    size       INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    language   INTEGER NOT NULL,
    lines      INTEGER NOT NULL,
    todos      INTEGER NOT NULL,
    fixmes     INTEGER NOT NULL,
    test       INTEGER NOT NULL,
    symbols    INTEGER NOT NULL,
    PRIMARY KEY (project_id, path)
);

CREATE TABLE project_symbols (
    project_id TEXT NOT NULL,
    path       TEXT NOT NULL,
    name       TEXT NOT NULL,
    name_lower TEXT NOT NULL,
    kind       INTEGER NOT NULL,
    language   INTEGER NOT NULL,
    line       INTEGER NOT NULL,
    col        INTEGER NOT NULL,
    end_line   INTEGER NOT NULL,
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
    take_ms      INTEGER NOT NULL,
    files        INTEGER NOT NULL,
    lines        INTEGER NOT NULL,
    symbols      INTEGER NOT NULL,
    todos        INTEGER NOT NULL,
    fixmes       INTEGER NOT NULL,
    test_files   INTEGER NOT NULL,
    vet_findings INTEGER,
    vet_missing  TEXT NOT NULL DEFAULT '',
    truncated    INTEGER NOT NULL,
    PRIMARY KEY (project_id, snapshot_key)
);
CREATE INDEX project_health_time ON project_health (project_id, take_ms);
