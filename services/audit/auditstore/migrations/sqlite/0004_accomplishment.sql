-- What a successful call achieved (its tool's accomplishment, e.g.
-- task_completed); empty for most calls and for outcomes recorded before.
ALTER TABLE audit_outcomes ADD COLUMN accomplishment TEXT NOT NULL DEFAULT '';
