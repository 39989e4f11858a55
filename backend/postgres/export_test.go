package postgres

// Statements exposes the SQL of the hot path to the benchmarks, so that the
// raw-pgx baseline runs exactly the statements the Store runs.
func (s *Store) Statements() (acquire, release, channel string) {
	return s.q.acquire, s.q.release, s.channel
}

// KeyHash exposes the NOTIFY payload of a key.
var KeyHash = keyHash

// Classify exposes classify to the table test.
var Classify = classify

// SchemaOf returns the store's schema name.
func SchemaOf(s *Store) string { return s.n.schema }
