-- The outbox of a domain that declares events (internal/outbox). Numbered
-- far from any domain's own migrations, which share schema_migrations.
CREATE TABLE outbox (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  event_id TEXT NOT NULL UNIQUE,
  name TEXT NOT NULL,
  payload_type TEXT NOT NULL,
  payload BLOB NOT NULL,
  time_ms INTEGER NOT NULL
);
