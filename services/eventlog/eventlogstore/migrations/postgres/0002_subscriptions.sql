-- Webhook subscriptions (events/subscribe). secret and prev_secret are
-- sealed (internal/seal) with the subscription id as additional data;
-- prev_secret still signs until prev_until_ms (a refresh's grace window).
-- expire_ms 0: no expiry; ended_ms 0: live. cursor: every event at or
-- before this seq is delivered or abandoned.
CREATE TABLE subscriptions (
  id TEXT PRIMARY KEY,
  principal TEXT NOT NULL,
  subject TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  roles TEXT NOT NULL,
  grants TEXT NOT NULL,
  name TEXT NOT NULL,
  arguments TEXT NOT NULL,
  url TEXT NOT NULL,
  secret BYTEA NOT NULL,
  prev_secret BYTEA,
  prev_until_ms BIGINT NOT NULL,
  cursor BIGINT NOT NULL,
  start_truncated BOOLEAN NOT NULL,
  expire_ms BIGINT NOT NULL,
  create_ms BIGINT NOT NULL,
  update_ms BIGINT NOT NULL,
  ended_ms BIGINT NOT NULL,
  end_reason TEXT NOT NULL,
  last_delivery_ms BIGINT NOT NULL,
  last_error TEXT NOT NULL,
  failed_since_ms BIGINT NOT NULL
);
CREATE INDEX subscriptions_by_principal ON subscriptions (principal, ended_ms);
