-- Version 2: the protected-resource fences. One row per resource holding the
-- highest fencing token a write to it was accepted with.
CREATE TABLE IF NOT EXISTS {{.Schema}}.{{.Fences}} (
	resource   text COLLATE "C" PRIMARY KEY,
	token      bigint      NOT NULL CHECK (token > 0),
	updated_at timestamptz NOT NULL
);
