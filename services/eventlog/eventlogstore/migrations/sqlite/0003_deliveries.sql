-- The events a subscription's receiver acknowledged (2xx) above its
-- cursor: a retried delivery of one of them is not posted again. Rows at
-- or below the cursor are removed when the cursor moves past them.
CREATE TABLE subscription_deliveries (
  subscription_id TEXT NOT NULL,
  seq BIGINT NOT NULL,
  PRIMARY KEY (subscription_id, seq)
);
