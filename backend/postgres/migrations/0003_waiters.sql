-- Version 3: the waiter mark. A contended acquisition by a client that
-- watches the key for its release sets waiting; the release that finds it
-- set clears it and notifies. A release that finds it clear notifies nobody,
-- so an uncontended release is a plain UPDATE.
ALTER TABLE {{.Schema}}.{{.Table}} ADD COLUMN IF NOT EXISTS waiting boolean NOT NULL DEFAULT false;
