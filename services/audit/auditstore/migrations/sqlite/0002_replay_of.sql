-- A replay (outcome 2, replayed) names the call whose change it repeated.
ALTER TABLE audit_records ADD COLUMN replay_of TEXT NOT NULL DEFAULT '';
