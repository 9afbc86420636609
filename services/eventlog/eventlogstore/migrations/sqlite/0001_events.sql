CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  payload BLOB NOT NULL,
  data TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  record_ms INTEGER NOT NULL
);
CREATE INDEX events_by_name ON events (name, seq);
CREATE INDEX events_by_record ON events (record_ms);
-- pruned_through: the highest seq retention removed (0: none).
CREATE TABLE events_log (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  pruned_through INTEGER NOT NULL
);
INSERT INTO events_log (id, pruned_through) VALUES (1, 0);
