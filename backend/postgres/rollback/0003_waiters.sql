-- Down of version 3: the waiter mark carries no lease state.
ALTER TABLE {{.Schema}}.{{.Table}} DROP COLUMN IF EXISTS waiting;
