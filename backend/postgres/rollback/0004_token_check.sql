-- Down of version 4: version 1's CHECK (token > 0) again (adding it reads
-- the whole table once).
DO $$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
		WHERE conrelid = '{{.Schema}}.{{.Table}}'::regclass AND contype = 'c'
			AND pg_catalog.pg_get_constraintdef(oid) = 'CHECK ((token > 0))') THEN
		ALTER TABLE {{.Schema}}.{{.Table}} ADD CHECK (token > 0);
	END IF;
END $$;
