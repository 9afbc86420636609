CREATE TABLE events (
  seq BIGSERIAL PRIMARY KEY,
  event_id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  payload BYTEA NOT NULL,
  data TEXT NOT NULL,
  time_ms BIGINT NOT NULL,
  record_ms BIGINT NOT NULL
);
CREATE INDEX events_by_name ON events (name, seq);
CREATE INDEX events_by_record ON events (record_ms);
-- pruned_through: the highest seq retention removed (0: none).
CREATE TABLE events_log (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  pruned_through BIGINT NOT NULL
);
INSERT INTO events_log (id, pruned_through) VALUES (1, 0);
