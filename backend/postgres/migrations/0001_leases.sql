-- Version 1: the lease table. One row per key, never deleted: the row keeps
-- the key's last fencing token across release and expiry. owner is NULL
-- once the grant was released.
CREATE TABLE IF NOT EXISTS {{.Schema}}.{{.Table}} (
	key         text COLLATE "C" PRIMARY KEY,
	owner       text COLLATE "C",
	token       bigint      NOT NULL CHECK (token > 0),
	acquired_at timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL
);
