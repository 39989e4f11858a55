package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

// The servers are started on first use, not in TestMain, so that a test
// run without -bench that needs none of them starts none.

// TestMain runs the tests and benchmarks, closes the clients the servers'
// meters hold, checks that no goroutine outlives them, then stops the
// servers. The clients are closed before the leak check: a valkey-go
// client whose keepalive PING met a reading has switched its connection to
// pipelining, whose goroutines live until Close. The servers and the
// schema drop are processes and connections gone at once, so they come
// after it (goleak's Cleanup).
func TestMain(m *testing.M) {
	opts := append(slices.Clone(testenv.IgnoredLeaks), testserver.StopAtExit(stopServers))
	goleak.VerifyTestMain(closingClients{m}, opts...)
}

// closingClients is m whose Run closes the meters' clients when the tests
// have run.
type closingClients struct{ m *testing.M }

func (c closingClients) Run() int {
	defer runLastFirst(&clients)
	return c.m.Run()
}

var (
	stopMu  sync.Mutex
	clients []func() // closed when the tests have run, before the leak check
	stops   []func() // run by stopServers after the leak check
)

// atEnd registers f on list, to run last first.
func atEnd(list *[]func(), f func()) {
	stopMu.Lock()
	*list = append(*list, f)
	stopMu.Unlock()
}

func atExit(f func()) { atEnd(&stops, f) }

func stopServers() { runLastFirst(&stops) }

func runLastFirst(list *[]func()) {
	stopMu.Lock()
	defer stopMu.Unlock()
	for i := len(*list) - 1; i >= 0; i-- {
		(*list)[i]()
	}
	*list = nil
}

// valkeyServer is the Valkey/Redis server's address and a meter of its CPU
// (through a client of its own).
type valkeyServer struct {
	addr  string
	meter meter
}

var (
	valkeyOnce sync.Once
	valkeySrv  valkeyServer
	valkeyErr  error
)

func needValkey(tb testing.TB) valkeyServer {
	tb.Helper()
	valkeyOnce.Do(func() {
		addr, stop, err := testserver.Redis()
		atExit(stop)
		if err != nil {
			valkeyErr = err
			return
		}
		c, err := newValkeyClient(addr)
		if err != nil {
			valkeyErr = err
			return
		}
		atEnd(&clients, c.Close)
		valkeySrv = valkeyServer{addr: addr, meter: meter{server: redisMeter(c)}}
	})
	if valkeyErr != nil {
		skip(tb, "valkey", testserver.EnvValkeyAddr, valkeyErr)
	}
	return valkeySrv
}

func newValkeyClient(addr string) (valkey.Client, error) {
	return valkey.NewClient(valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true})
}

// unlinkTagged deletes every key whose name contains tag.
func unlinkTagged(ctx context.Context, c valkey.Client, tag string) error {
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match("*"+tag+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		if len(e.Elements) > 0 {
			if err := c.Do(ctx, c.B().Unlink().Key(e.Elements...).Build()).Error(); err != nil {
				return err
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			return nil
		}
	}
}

// postgresServer is the PostgreSQL database's URL, the schema that holds
// this process's tables (the floor's raw_leases and the Store's), and a
// meter of the server's CPU when the server is private.
type postgresServer struct {
	url, schema string
	meter       meter
}

var (
	pgOnce sync.Once
	pgSrv  postgresServer
	pgErr  error
)

func needPostgres(tb testing.TB) postgresServer {
	tb.Helper()
	pgOnce.Do(func() { pgSrv, pgErr = startPostgres() })
	if pgErr != nil {
		skip(tb, "postgres", testserver.EnvPostgresURL, pgErr)
	}
	return pgSrv
}

func startPostgres() (postgresServer, error) {
	var ps postgresServer
	if u := os.Getenv(testserver.EnvPostgresURL); u != "" {
		ps.url = u // a shared server: its CPU is not ours to read
	} else {
		// fsync on, as the peers harness runs PostgreSQL: the floor and
		// the library pay for durable commits alike.
		s, err := testserver.StartPostgres(testserver.PostgresOptions{Fsync: true, Settings: []string{"max_connections=300"}})
		if err != nil {
			return ps, err
		}
		atExit(s.Stop)
		ps.url = s.URL()
		ps.meter = meter{server: postgresMeter(filepath.Join(s.Dir(), "data"))}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	ps.schema = "bench_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, ps.url)
	if err != nil {
		return ps, err
	}
	defer conn.Close(ctx)
	q := pgx.Identifier{ps.schema}.Sanitize()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+q); err != nil {
		return ps, err
	}
	atExit(func() { dropSchema(ps.url, q) })
	if _, err := conn.Exec(ctx, "SET search_path TO "+q); err != nil {
		return ps, err
	}
	if _, err := conn.Exec(ctx, rawPGSchema); err != nil {
		return ps, err
	}
	pool, err := ps.pool(ctx, 2)
	if err != nil {
		return ps, err
	}
	defer pool.Close()
	for _, o := range []postgres.Options{ps.options(), ps.waitOptions()} {
		if err := postgres.Migrate(ctx, pool, o); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

// options are the Stores' tables.
func (ps postgresServer) options() postgres.Options { return postgres.Options{Schema: ps.schema} }

// waitOptions are the tables of the handoff's waiting layer: tables of
// their own, so that its Stores' LISTEN connections (one NOTIFY channel per
// table) do not receive the other layers' release notifications while
// those are measured.
func (ps postgresServer) waitOptions() postgres.Options {
	return postgres.Options{Schema: ps.schema, Table: "leases_wait", FenceTable: "fences_wait"}
}

func dropSchema(url, q string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if conn, err := pgx.Connect(ctx, url); err == nil {
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+q+" CASCADE")
		_ = conn.Close(ctx)
	}
}

// pool opens a pool of at most conns connections whose search_path is the
// schema, so that the floor's unqualified statements find raw_leases.
func (ps postgresServer) pool(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(ps.url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(conns)
	pc.ConnConfig.RuntimeParams["search_path"] = ps.schema
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// truncate empties this process's lease tables (between benchmarks: every
// benchmark uses keys of its own, so this only keeps the tables small).
func (ps postgresServer) truncate(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, ps.url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "TRUNCATE "+pgx.Identifier{ps.schema, "raw_leases"}.Sanitize()+", "+
		pgx.Identifier{ps.schema, postgres.DefaultTable}.Sanitize()+", "+
		pgx.Identifier{ps.schema, ps.waitOptions().Table}.Sanitize())
	return err
}

// skip skips tb for lack of a server, or ends the run when the test
// command demands real backends.
func skip(tb testing.TB, name, env string, err error) {
	tb.Helper()
	tb.Skip(testserver.SkipReason(name, env, err))
}

// TestMeterClientClosedBeforeLeakCheck reads the Valkey meter with a
// cancellable context, which switches valkey-go's connection to pipelining
// at once (its goroutines then live until Client.Close): TestMain must
// close the meter's client before goleak looks, or the binary fails. A
// keepalive PING that meets a reading does the same by chance.
func TestMeterClientClosedBeforeLeakCheck(t *testing.T) {
	srv := needValkey(t)
	if _, ok := srv.meter.serverNow(t.Context()); !ok {
		t.Fatal("the Valkey meter read nothing")
	}
}
