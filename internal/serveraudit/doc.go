// Package serveraudit reads what a real Valkey/Redis or PostgreSQL server
// committed to the lease keys of a test, independently of what any client
// was told, and checks it: the grant log's consistency (checker C1) and the
// match of every client call against it (checker C4). Only tests import
// it; the backends know nothing of it.
//
// # Where the audit comes from
//
//   - PostgreSQL: Install adds, in the test's own schema, an AFTER INSERT OR
//     UPDATE OR DELETE ... FOR EACH ROW trigger on the lease table that
//     appends the row's old and new values, clock_timestamp() and the
//     transaction id to an audit table. The trigger runs inside the
//     statement that changed the row, so the audit row commits (or is lost
//     in a crash) together with the change. ReadPostgres reads it back.
//   - Valkey/Redis: the server's append-only file. Redis 7 writes a
//     script's effects (MULTI, INCR, SET of the lease value with PXAT,
//     EXEC; a renewal's PEXPIREAT; a lone DEL) to the file before it
//     replies, so the file holds every acknowledged change and every change
//     whose reply was lost. ReadAOF replays it into records. It needs the
//     server's directory (a private server), appendonly yes and no AOF
//     rewrite since the start (a rewrite folds the history into a snapshot).
//
// # What each record knows
//
// A grant carries owner, token, and the server's acquired and expires
// times; a renewal the new acquired and expires times. A PostgreSQL release
// carries owner and token (the row's owner set to NULL). On Valkey the lease
// value holds the TTL and the key's expiry the grant's expiry, so acquired
// is expires - TTL: the script's TIME rounded up by less than 1ms
// (Log.Rounding). A Valkey release
// and the server's cleanup of an expired lease key are the same command
// (DEL) and carry no time: such an End record is bracketed by the server
// times of the records around it in the file (NotBefore, NotAfter), and
// ends whatever grant is current.
//
// # What the checks assume
//
// Check assumes the log is complete from the key's first grant (true for a
// fresh schema or key prefix on a server that lost nothing). After a crash
// that lost writes, the log is what the surviving server persisted: it is
// consistent by itself, and Match reports the acknowledged calls it lost
// as "missing-success". Client and server run on one machine and read one
// wall clock; Match allows Slack between the two readings.
package serveraudit
