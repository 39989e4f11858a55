package postgres_test

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/backendtest"
)

// FuzzOptions feeds New, MigrationFS and Migrate any schema and table
// names and any layout. Nothing may panic. Options are accepted exactly
// when the names (defaults applied) obey the documented rule: each matches
// [a-z_][a-z0-9_]{0,62}, the two tables differ and neither is the version
// table. An accepted name appears in the rendered SQL only as a quoted
// identifier, in the places the default names take: every statement and
// migration file equals the default one with "lease", "leases" and
// "fences" replaced by the quoted names. A rejection is ErrInvalidState
// only, and never carries a name. The pool points at a port where nothing
// listens: construction does no I/O, and Migrate is only called with
// options it must reject before any. The seeds run with every go test;
// the long tier runs, for instance:
//
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 30s ./backend/postgres
func FuzzOptions(f *testing.F) {
	cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		f.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(pool.Close)
	def, err := postgres.New(pool, postgres.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defSQL := postgres.SQL(def)
	bad, dup := postgres.Options{Schema: "-"}, postgres.Options{Table: "x", FenceTable: "x"}
	fixed := backendtest.Messages(newErr(pool, bad), newErr(pool, dup),
		migrationFSErr(bad, postgres.Goose), migrationFSErr(dup, postgres.Goose), migrationFSErr(postgres.Options{}, 0),
		postgres.Migrate(context.Background(), pool, bad), postgres.Migrate(context.Background(), pool, dup))
	defFS := make(map[postgres.Layout]map[string]string)
	for _, l := range []postgres.Layout{postgres.Goose, postgres.GolangMigrate, postgres.Plain} {
		fsys, err := postgres.MigrationFS(postgres.Options{}, l)
		if err != nil {
			f.Fatal(err)
		}
		defFS[l] = readAll(f, fsys)
	}
	long := strings.Repeat("x", 63)
	for _, s := range []struct {
		schema, table, fences string
		layout                int
	}{
		{"", "", "", 1},
		{"lease", "leases", "fences", 2},
		{"app", "locks", "fence_tokens", 3},
		{"_", "_0", "a_", 1},
		{long, long[:62] + "y", long[:62] + "z", 1},
		{long + "x", "", "", 1},             // 64 bytes
		{"App", "", "", 1},                  // upper case
		{"0app", "", "", 1},                 // leading digit
		{"a-b", "", "", 1},                  // dash
		{`x"; DROP TABLE y; --`, "", "", 1}, // injection
		{"", `t" CASCADE`, "", 2},           // injection in a table
		{"", "", "f\x00", 3},                // NUL
		{"app\n", "", "", 1},                // trailing newline
		{"", "same", "same", 1},             // one table twice
		{"", "fences", "", 1},               // the default fence table as lease table
		{"", "", "leases", 1},               // and the converse
		{"", "lease_migrations", "", 1},     // the version table
		{"", "", "lease_migrations", 1},     // the version table as fence table
		{"lease_migrations", "", "", 1},     // a schema may have that name
		{"naïve", "", "", 1},                // non-ASCII
		{"", "", "", 0},                     // no layout
		{"", "", "", 4},                     // an unknown layout
		{"", "", "", -1},                    // a negative one
		{"public", "leases", "fences", 1},
	} {
		f.Add(s.schema, s.table, s.fences, s.layout)
	}
	f.Fuzz(func(t *testing.T, schema, table, fences string, layout int) {
		o := postgres.Options{Schema: schema, Table: table, FenceTable: fences}
		es, et, ef := cmpOr(schema, postgres.DefaultSchema), cmpOr(table, postgres.DefaultTable), cmpOr(fences, postgres.DefaultFenceTable)
		valid := ident(es) && ident(et) && ident(ef) && et != ef && et != "lease_migrations" && ef != "lease_migrations"
		l := postgres.Layout(layout)

		s, err := postgres.New(pool, o)
		fsys, fsErr := postgres.MigrationFS(o, l)
		if !valid {
			if s != nil {
				t.Fatalf("New(%+v) returned a store with error %v", o, err)
			}
			backendtest.WantRejected(t, "New", err, fixed, schema, table, fences)
			backendtest.WantRejected(t, "MigrationFS", fsErr, fixed, schema, table, fences)
			if fsys != nil {
				t.Fatalf("MigrationFS(%+v) returned files with error %v", o, fsErr)
			}
			backendtest.WantRejected(t, "Migrate", postgres.Migrate(t.Context(), pool, o), fixed, schema, table, fences)
			return
		}
		if err != nil || s == nil {
			t.Fatalf("New(%+v): %v, want a store (the names obey the rule)", o, err)
		}
		if got := postgres.SchemaOf(s); got != es {
			t.Fatalf("New(%+v): schema %q, want %q", o, got, es)
		}
		_, _, ch := s.Statements()
		if !channelRE.MatchString(ch) {
			t.Fatalf("New(%+v): release channel %q is not lease_release_ and 24 hex digits", o, ch)
		}
		r := strings.NewReplacer(`"lease"."leases"`, q(es)+"."+q(et), `"lease"."fences"`, q(es)+"."+q(ef), `"lease"`, q(es))
		for i, stmt := range postgres.SQL(s) {
			if want := r.Replace(defSQL[i]); stmt != want {
				t.Fatalf("New(%+v): statement %d is\n%s\nwant\n%s", o, i, stmt, want)
			}
		}
		want, known := defFS[l]
		if !known {
			backendtest.WantRejected(t, "MigrationFS (layout)", fsErr, fixed)
			if fsys != nil {
				t.Fatalf("MigrationFS(layout %d) returned files with error %v", layout, fsErr)
			}
			return
		}
		if fsErr != nil {
			t.Fatalf("MigrationFS(%+v, %d): %v", o, layout, fsErr)
		}
		got := readAll(t, fsys)
		if len(got) != len(want) {
			t.Fatalf("MigrationFS(%+v, %d): %d files, want %d", o, layout, len(got), len(want))
		}
		for name, text := range want {
			if g, ok := got[name]; !ok || g != r.Replace(text) {
				t.Fatalf("MigrationFS(%+v, %d): file %s is\n%s\nwant\n%s", o, layout, name, g, r.Replace(text))
			}
		}
	})
}

func newErr(pool *pgxpool.Pool, o postgres.Options) error {
	_, err := postgres.New(pool, o)
	return err
}

func migrationFSErr(o postgres.Options, l postgres.Layout) error {
	_, err := postgres.MigrationFS(o, l)
	return err
}

var channelRE = regexp.MustCompile(`^lease_release_[0-9a-f]{24}$`)

// ident is the documented identifier rule, written out by hand rather than
// with the package's regular expression.
func ident(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func q(s string) string { return `"` + s + `"` }

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// readAll returns the files of fsys by name.
func readAll(tb testing.TB, fsys fs.FS) map[string]string {
	tb.Helper()
	out := make(map[string]string)
	names, err := fs.Glob(fsys, "*")
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(names)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			tb.Fatal(err)
		}
		out[n] = string(b)
	}
	return out
}
