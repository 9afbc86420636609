-- The audit trail: one row per record, in chain order. Unique seq, call_id
-- and prev_hash make a fork (two records after one predecessor) impossible
-- even if two writers got past the head lock.
CREATE TABLE audit_records (
    seq         INTEGER PRIMARY KEY,
    time_ms     INTEGER NOT NULL,
    actor       TEXT NOT NULL,
    tool        TEXT NOT NULL,
    reason      TEXT NOT NULL,
    args_digest TEXT NOT NULL,
    outcome     INTEGER NOT NULL,
    call_id     TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE UNIQUE INDEX audit_records_call_id ON audit_records (call_id);
CREATE UNIQUE INDEX audit_records_prev_hash ON audit_records (prev_hash);
CREATE INDEX audit_records_actor ON audit_records (actor, seq);
CREATE INDEX audit_records_tool ON audit_records (tool, seq);
CREATE INDEX audit_records_time ON audit_records (time_ms, seq);

-- Append-only: the service never updates or deletes a record. These guards
-- stop mistakes, not an attacker who can drop them; verify catches that.
CREATE TRIGGER audit_records_no_update BEFORE UPDATE ON audit_records
BEGIN
    SELECT RAISE(ABORT, 'audit records are append-only');
END;
CREATE TRIGGER audit_records_no_delete BEFORE DELETE ON audit_records
BEGIN
    SELECT RAISE(ABORT, 'audit records are append-only');
END;

-- The head checkpoint: the last record's seq and hash, written in the same
-- transaction as the record. Its row lock serialises appends, and it shows a
-- cut-off tail. seq 0 and 64 zeros are the empty chain.
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '0000000000000000000000000000000000000000000000000000000000000000');
