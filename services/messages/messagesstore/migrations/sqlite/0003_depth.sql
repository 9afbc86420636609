-- The invocation depth a call made on behalf of a message runs at (the
-- sender's depth plus one). Messages stored before it count as depth 0.
ALTER TABLE messages ADD COLUMN depth INTEGER NOT NULL DEFAULT 0;
