-- The workflow run an ask belongs to (a workflow approval node's ask), so
-- that the owner sees it beside the question. Other asks have none.
ALTER TABLE asks ADD COLUMN run TEXT NOT NULL DEFAULT '';
