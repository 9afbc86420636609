-- A task may belong to one of its agent's projects (the projects domain's
-- id). tasks does not check that the project exists: see docs/projects.md.
-- Tasks stored before belong to none.
ALTER TABLE tasks ADD COLUMN project_id TEXT NOT NULL DEFAULT '';
CREATE INDEX tasks_agent_project ON tasks (agent_id, project_id, create_ms DESC, id DESC);
