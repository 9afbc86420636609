-- Agents are listed in id order, and that order is the same on every
-- database: bytewise, as SQLite compares text. A PostgreSQL database's
-- default collation is usually a natural language's (en_US.UTF-8), which
-- ignores '-' and '_' at first and would list "agent_c" before "agent-b".
ALTER TABLE agents ALTER COLUMN id TYPE TEXT COLLATE "C";
