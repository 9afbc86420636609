CREATE TABLE asks (
    id              TEXT PRIMARY KEY,
    agent_id        TEXT NOT NULL,
    question        TEXT NOT NULL,
    options_json    TEXT NOT NULL DEFAULT '[]',
    context         TEXT NOT NULL DEFAULT '',
    status          BIGINT NOT NULL,
    answer          TEXT NOT NULL DEFAULT '',
    answered_by     TEXT NOT NULL DEFAULT '',
    create_ms       BIGINT NOT NULL,
    expire_ms       BIGINT NOT NULL,
    resolve_ms      BIGINT NOT NULL DEFAULT 0,
    workflow_id     TEXT NOT NULL
);
CREATE INDEX asks_created ON asks (create_ms DESC, id DESC);
CREATE INDEX asks_agent_created ON asks (agent_id, create_ms DESC, id DESC);

CREATE TABLE channels (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    kind            BIGINT NOT NULL,
    enabled         BOOLEAN NOT NULL,
    min_level       BIGINT NOT NULL,
    webhook_url     TEXT NOT NULL DEFAULT '',
    webhook_secret  TEXT NOT NULL DEFAULT '',
    create_ms       BIGINT NOT NULL,
    update_ms       BIGINT NOT NULL
);

-- A new owner database starts with one channel: the service log, so that
-- notifications and asks reach the owner out of the box. Deleting it sticks:
-- this runs once per database.
INSERT INTO channels (id, name, kind, enabled, min_level, create_ms, update_ms)
VALUES ('chn_00000000000000000000000000', 'log', 1, TRUE, 1,
        (extract(epoch FROM now()) * 1000)::BIGINT, (extract(epoch FROM now()) * 1000)::BIGINT);
