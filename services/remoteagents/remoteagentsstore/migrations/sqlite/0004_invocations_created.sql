-- The owner lists every agent's invocations, newest first.
CREATE INDEX invocations_created ON invocations (create_ms DESC, id DESC);
