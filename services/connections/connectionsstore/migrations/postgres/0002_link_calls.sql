-- One row per call that asked for a link and is over, for a day: linked = 1
-- once a link made for it was stored, 0 once it ended without one
-- (cancelled, declined, expired). Whichever is written first stays: a link
-- for an ended call stores nothing, and a linked call cannot be ended.
CREATE TABLE link_calls (
    agent     TEXT NOT NULL,
    call_key  TEXT NOT NULL,
    linked    INTEGER NOT NULL,
    expire_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, call_key)
);
CREATE INDEX link_calls_expire ON link_calls (expire_ms);
