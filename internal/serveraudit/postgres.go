package serveraudit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// AuditTable is the table Install creates next to the lease table.
const AuditTable = "lease_audit"

// DB is what Install and ReadPostgres need of a connection or pool
// (*pgx.Conn and *pgxpool.Pool have it).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Install creates, in schema, the audit table and a row trigger on the
// lease table (schema.table, as postgres.Migrate made it) that appends
// the row's old and new values, clock_timestamp() and txid_current() to
// the audit table for every INSERT, DELETE and UPDATE of the lease's
// columns (owner, token, times: not an update of the waiter mark alone,
// which a contended acquisition writes and which changes no grant). The
// trigger runs
// inside the statement that changed the row, so its record commits with
// it. Install is for a test's own schema: it fails if the audit exists.
func Install(ctx context.Context, db DB, schema, table string) error {
	a := pgx.Identifier{schema, AuditTable}.Sanitize()
	fn := pgx.Identifier{schema, AuditTable + "_row"}.Sanitize()
	t := pgx.Identifier{schema, table}.Sanitize()
	sql := fmt.Sprintf(`
CREATE TABLE %[1]s (
	seq          bigserial PRIMARY KEY,
	op           text NOT NULL,
	key          text COLLATE "C" NOT NULL,
	old_owner    text COLLATE "C",
	old_token    bigint,
	old_acquired timestamptz,
	old_expires  timestamptz,
	new_owner    text COLLATE "C",
	new_token    bigint,
	new_acquired timestamptz,
	new_expires  timestamptz,
	at           timestamptz NOT NULL DEFAULT clock_timestamp(),
	txid         bigint NOT NULL DEFAULT txid_current()
);
CREATE FUNCTION %[2]s() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'INSERT' THEN
		INSERT INTO %[1]s (op, key, new_owner, new_token, new_acquired, new_expires)
		VALUES (TG_OP, NEW.key, NEW.owner, NEW.token, NEW.acquired_at, NEW.expires_at);
	ELSIF TG_OP = 'UPDATE' THEN
		INSERT INTO %[1]s (op, key, old_owner, old_token, old_acquired, old_expires, new_owner, new_token, new_acquired, new_expires)
		VALUES (TG_OP, NEW.key, OLD.owner, OLD.token, OLD.acquired_at, OLD.expires_at, NEW.owner, NEW.token, NEW.acquired_at, NEW.expires_at);
	ELSE
		INSERT INTO %[1]s (op, key, old_owner, old_token, old_acquired, old_expires)
		VALUES (TG_OP, OLD.key, OLD.owner, OLD.token, OLD.acquired_at, OLD.expires_at);
	END IF;
	RETURN NULL;
END
$$;
CREATE TRIGGER %[4]s AFTER INSERT OR UPDATE OF owner, token, acquired_at, expires_at OR DELETE ON %[3]s
	FOR EACH ROW EXECUTE FUNCTION %[2]s();`, a, fn, t, pgx.Identifier{AuditTable}.Sanitize())
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("serveraudit: install the audit trigger: %w", err)
	}
	return nil
}

// ReadPostgres reads the audit of schema, in sequence order, as records:
// an INSERT or an UPDATE that changes the token is a Grant (Check
// reports one that lowers it); an UPDATE of
// the same token and owner that moves the times is a Renew; one that sets
// the owner to NULL is a Release; anything else (a DELETE, an UPDATE that
// changes nothing the library changes) is Unknown. Rows of one key are
// changed under its row lock, so their sequence order is the order of
// the changes.
func ReadPostgres(ctx context.Context, db DB, schema string) (*Log, error) {
	rows, err := db.Query(ctx, fmt.Sprintf(`SELECT seq, op, key, old_owner, old_token, new_owner, new_token, new_acquired, new_expires, at, txid
FROM %s ORDER BY seq`, pgx.Identifier{schema, AuditTable}.Sanitize()))
	if err != nil {
		return nil, fmt.Errorf("serveraudit: read the audit: %w", err)
	}
	defer rows.Close()
	l := &Log{Backend: "postgres"}
	for rows.Next() {
		var (
			seq, txid            int64
			op, key              string
			oldOwner, newOwner   *string
			oldToken, newToken   *int64
			newAcquired, newExpi *time.Time
			at                   time.Time
		)
		if err := rows.Scan(&seq, &op, &key, &oldOwner, &oldToken, &newOwner, &newToken, &newAcquired, &newExpi, &at, &txid); err != nil {
			return nil, fmt.Errorf("serveraudit: scan the audit: %w", err)
		}
		r := Record{Seq: int(seq), Key: key, At: at, Txn: txid}
		if newToken != nil {
			r.Token = uint64(*newToken)
		}
		if newAcquired != nil {
			r.Acquired = *newAcquired
		}
		if newExpi != nil {
			r.Expires = *newExpi
		}
		str := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		switch {
		case op == "INSERT" && newOwner != nil:
			r.Kind, r.Owner = Grant, *newOwner
		case op == "UPDATE" && oldToken != nil && newToken != nil && *newToken != *oldToken && newOwner != nil:
			r.Kind, r.Owner = Grant, *newOwner
		case op == "UPDATE" && oldToken != nil && newToken != nil && *newToken == *oldToken && oldOwner != nil && newOwner == nil:
			r.Kind, r.Owner = Release, *oldOwner
		case op == "UPDATE" && oldToken != nil && newToken != nil && *newToken == *oldToken && oldOwner != nil && newOwner != nil && *oldOwner == *newOwner:
			r.Kind, r.Owner = Renew, *newOwner
		default:
			r.Kind = Unknown
			r.Detail = fmt.Sprintf("%s: owner %q → %q", op, str(oldOwner), str(newOwner))
			if oldToken != nil {
				r.Detail += fmt.Sprintf(", token %d", *oldToken)
			}
			if newToken != nil {
				r.Detail += fmt.Sprintf(" → %d", *newToken)
			}
		}
		l.Records = append(l.Records, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("serveraudit: read the audit: %w", err)
	}
	return l, nil
}
