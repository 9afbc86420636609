-- Messages this mesh's agents sent to remote A2A agents.
CREATE TABLE invocations (
    id            TEXT PRIMARY KEY,
    agent_id      TEXT NOT NULL,
    url           TEXT NOT NULL,
    message       TEXT NOT NULL,
    status        INTEGER NOT NULL,
    answer        TEXT NOT NULL DEFAULT '',
    task_id       TEXT NOT NULL DEFAULT '',
    context_id    TEXT NOT NULL DEFAULT '',
    remote_state  TEXT NOT NULL DEFAULT '',
    error         TEXT NOT NULL DEFAULT '',
    depth         INTEGER NOT NULL,
    workflow_id   TEXT NOT NULL,
    create_ms     INTEGER NOT NULL,
    expire_ms     INTEGER NOT NULL,
    resolve_ms    INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX invocations_agent_created ON invocations (agent_id, create_ms DESC, id DESC);

-- A2A tasks opened by messages remote agents sent to this mesh's agents.
CREATE TABLE inbound (
    task_id           TEXT PRIMARY KEY,
    context_id        TEXT NOT NULL,
    agent_id          TEXT NOT NULL,
    sender            TEXT NOT NULL,
    a2a_message_id    TEXT NOT NULL,
    message_id        TEXT NOT NULL,
    thread_id         TEXT NOT NULL,
    body              TEXT NOT NULL,
    depth             INTEGER NOT NULL,
    status            INTEGER NOT NULL,
    answer            TEXT NOT NULL DEFAULT '',
    answer_message_id TEXT NOT NULL DEFAULT '',
    create_ms         INTEGER NOT NULL,
    update_ms         INTEGER NOT NULL,
    UNIQUE (sender, a2a_message_id)
);
