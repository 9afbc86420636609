-- What a remote agent reported while it worked on an invocation (its
-- status messages and artifacts, read from its stream): the latest on the
-- invocation, and each once, by its key, in the order it came.
ALTER TABLE invocations ADD COLUMN progress TEXT NOT NULL DEFAULT '';

CREATE TABLE invocation_events (
    invocation_id TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    event_key     TEXT NOT NULL,
    remote_state  TEXT NOT NULL DEFAULT '',
    text          TEXT NOT NULL DEFAULT '',
    at_ms         INTEGER NOT NULL,
    PRIMARY KEY (invocation_id, seq),
    UNIQUE (invocation_id, event_key)
);
