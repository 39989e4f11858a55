-- Version 4: the lease table no longer carries version 1's CHECK
-- (token > 0). Tokens are written only by the Store's statements, which
-- start a key at 1 and add one (a bigint overflow is an error, never a
-- wrap), so the check never rejected anything; PostgreSQL compiled it
-- again for every statement that inserts or updates a lease row. Nothing
-- else changes.
DO $$
DECLARE c name;
BEGIN
	FOR c IN SELECT conname FROM pg_catalog.pg_constraint
		WHERE conrelid = '{{.Schema}}.{{.Table}}'::regclass AND contype = 'c'
			AND pg_catalog.pg_get_constraintdef(oid) = 'CHECK ((token > 0))'
	LOOP
		EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', '{{.Schema}}.{{.Table}}', c);
	END LOOP;
END $$;
