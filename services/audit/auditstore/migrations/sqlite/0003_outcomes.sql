-- How every tool call ended, for reputation (not part of the hash chain):
-- one row per call id, pruned by age and count (the service's retention).
CREATE TABLE audit_outcomes (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT NOT NULL UNIQUE,
    time_ms     INTEGER NOT NULL,
    agent       TEXT NOT NULL,
    subject     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    kind        INTEGER NOT NULL,
    domain_code TEXT NOT NULL,
    duration_ms INTEGER NOT NULL
);
CREATE INDEX audit_outcomes_agent ON audit_outcomes (agent, time_ms);
CREATE INDEX audit_outcomes_time ON audit_outcomes (time_ms);
