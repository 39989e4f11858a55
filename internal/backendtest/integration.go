// Package backendtest holds test helpers shared by lease's test packages.
// Only tests import it.
//
// integration.go serves the tests of the integrations (scheduler, queue,
// service): real Valkey and PostgreSQL servers started lazily, once per test
// binary, through internal/testserver and stopped after the leak check
// ([Main]); a subtest per real backend, each with a fresh namespace of its
// own ([ForEachReal]); the start–stop contract the integrations share
// ([CheckStartStop], [Start]); and the small helpers every integration's
// tests repeat ([Policy], [WantKind], [MemoryStore], [FaultyClient], [Log],
// [Pause], [RandomName], [LagProbe]).
//
// When a server is neither given by the environment (LEASE_TEST_VALKEY_ADDR,
// LEASE_TEST_POSTGRES_URL) nor can be started from PATH, the tests that need
// it skip, naming the variable, unless LEASE_REQUIRE_BACKENDS=1: then the
// test binary fails (see testserver.SkipReason).
package backendtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	vk "github.com/valkey-io/valkey-go"
	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// lazyServer is one real server, found or started on first use. The
// zero value is ready; it is safe for concurrent use.
type lazyServer struct {
	name, envVar string
	find         func() (addr string, stop func(), err error) // testserver.Redis or Postgres

	once sync.Once
	addr string // valid when skip is ""
	skip string // why the tests that need the server skip; "" when it runs
	stop func() // set by once; called by stopServers
}

// The real servers of this test binary.
var (
	valkeyServer   = &lazyServer{name: "valkey", envVar: testserver.EnvValkeyAddr, find: testserver.Redis}
	postgresServer = &lazyServer{name: "postgres", envVar: testserver.EnvPostgresURL, find: testserver.Postgres}
)

// get returns the server's address, finding or starting it on first use,
// and skips t when there is none (SkipReason exits the binary instead when
// LEASE_REQUIRE_BACKENDS=1).
func (s *lazyServer) get(t testing.TB) string {
	t.Helper()
	s.once.Do(func() {
		addr, stop, err := s.find()
		s.addr, s.stop = addr, stop
		s.skip = testserver.SkipReason(s.name, s.envVar, err)
	})
	if s.skip != "" {
		t.Skip(s.skip)
	}
	return s.addr
}

// stopServers stops the servers get started. It runs once every test has
// returned, so no get runs concurrently; a server never used has no stop.
func stopServers() {
	for _, s := range []*lazyServer{valkeyServer, postgresServer} {
		s.once.Do(func() {}) // a later get must not start a server now
		if s.stop != nil {
			s.stop()
		}
	}
}

// Main is the TestMain of an integration's test package: it runs the tests
// and checks for leaked goroutines (goleak.VerifyTestMain with
// testenv.IgnoredLeaks and opts), then stops the servers that [Valkey],
// [Postgres] and [ForEachReal] started (servers are processes, not
// goroutines: stopping them after the leak check hides nothing from it) and
// exits with the tests' status. It does not return.
func Main(m *testing.M, opts ...goleak.Option) {
	opts = append(slices.Clone(testenv.IgnoredLeaks), opts...)
	opts = append(opts, testserver.StopAtExit(stopServers))
	goleak.VerifyTestMain(m, opts...)
}

// Valkey returns the address ("host:port") of a Valkey or Redis server for
// this test binary: LEASE_TEST_VALKEY_ADDR when set, otherwise a private
// server started on the first call and stopped by [Main]. The server is
// shared: use keys of your own. It skips t when there is none (or fails the
// binary under LEASE_REQUIRE_BACKENDS=1). Safe for concurrent use.
func Valkey(t testing.TB) string {
	t.Helper()
	return valkeyServer.get(t)
}

// Postgres returns the URL of a PostgreSQL database for this test binary:
// LEASE_TEST_POSTGRES_URL when set, otherwise a private server started on
// the first call and stopped by [Main]. The database is shared: use a schema
// of your own. It skips t when there is none (or fails the binary under
// LEASE_REQUIRE_BACKENDS=1). Safe for concurrent use.
func Postgres(t testing.TB) string {
	t.Helper()
	return postgresServer.get(t)
}

// NewBackend returns a new store on a real server, with a connection (a
// client or a pool) of its own, closed with the store at t's cleanup.
type NewBackend func(t *testing.T) leaseapi.Backend

// ForEachReal runs body as the subtest "valkey", then as the subtest
// "postgres". In each, newBackend makes stores that share one namespace of
// their own, named after name and random: a key prefix name+"-..." on
// Valkey; a schema name+"_..." on PostgreSQL, migrated by the first store
// and dropped at the subtest's cleanup. A subtest whose server is missing
// skips, as [Valkey] and [Postgres] do.
func ForEachReal(t *testing.T, name string, body func(t *testing.T, newBackend NewBackend)) {
	t.Helper()
	t.Run("valkey", func(t *testing.T) {
		body(t, valkeyStores(Valkey(t), RandomName(name+"-")))
	})
	t.Run("postgres", func(t *testing.T) {
		body(t, postgresStores(t, Postgres(t), RandomName(name+"_")))
	})
}

// valkeyStores makes stores on the server at addr, keys under prefix.
func valkeyStores(addr, prefix string) NewBackend {
	return func(t *testing.T) leaseapi.Backend {
		c, err := vk.NewClient(vk.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatalf("valkey client: %v", err)
		}
		t.Cleanup(c.Close)
		s, err := valkey.New(c, valkey.Options{Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
}

// postgresStores makes stores in schema of the database at url; the first
// store migrates the schema, and t's cleanup drops it.
func postgresStores(t *testing.T, url, schema string) NewBackend {
	opts := postgres.Options{Schema: schema}
	ctx := t.Context()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema: %v", err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{opts.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	migrated := false
	return func(t *testing.T) leaseapi.Backend {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if !migrated {
			if err := postgres.Migrate(ctx, pool, opts); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			migrated = true
		}
		s, err := postgres.New(pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// RandomName returns prefix followed by 12 random hex digits: a key prefix,
// a schema or a key name no other test (or test binary) uses.
func RandomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// MemoryStore returns a new in-memory store, failing t if it cannot.
func MemoryStore(t testing.TB) *memory.Store {
	t.Helper()
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Policy returns the policy o describes, failing t if it is invalid.
func Policy(t testing.TB, o leaseapi.PolicyOptions) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(o)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	return p
}

// WantKind fails t unless err matches exactly the sentinel want: its
// leaseapi.Kind is want and errors.Is(err, want). what names the call.
func WantKind(t testing.TB, what string, err, want error) {
	t.Helper()
	if got := leaseapi.Kind(err); got != want || !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error matching exactly %v", what, err, want)
	}
}

// Pause waits d on the clock (simulated inside simtest.Simulate or a
// synctest bubble) or until ctx ends, then returns ctx.Err(): nil when d
// passed first.
func Pause(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FaultyClient returns a client with options o over a fault wrapper of b
// (simtest.Faulty), for one simulated server of a fleet. At t's cleanup the
// wrapper is set back to Pass and the client is closed; a Close error fails
// t. Register the integration's Stop after calling FaultyClient, so that it
// runs first.
func FaultyClient(t testing.TB, b leaseapi.Backend, o runtime.ClientOptions) (*runtime.Client, *simtest.Faulty) {
	t.Helper()
	f := simtest.NewFaulty(b)
	c, err := runtime.NewClient(f, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.SetMode(simtest.Pass)
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c, f
}

// Log collects values, such as an integration's events, from callbacks on
// any goroutine. The zero value is empty and ready; it is safe for
// concurrent use.
type Log[E any] struct {
	mu   sync.Mutex // guards list
	list []E
}

// Add appends e; its method value fits an OnEvent option.
func (l *Log[E]) Add(e E) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, e)
}

// All returns a copy of what was added, in order.
func (l *Log[E]) All() []E {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]E(nil), l.list...)
}

// Count returns how many of the values added match.
func (l *Log[E]) Count(match func(E) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.list {
		if match(e) {
			n++
		}
	}
	return n
}

// StartStopper is the start–stop API the integrations share
// (scheduler.Scheduler, queue.Worker, service.Singleton).
type StartStopper interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// StartStopHooks are an integration's own checks, run by [CheckStartStop]
// on the value it exercises at three points of its life. A nil hook is
// skipped.
type StartStopHooks[R StartStopper] struct {
	BeforeStart  func(r R) // before the first Start
	WhileStarted func(r R) // after the second Start was refused
	AfterStop    func(r R) // after Start after Stop was refused
}

// CheckStartStop checks the start–stop contract the integrations share.
// On r, which must be new: Start(nil) and Stop(nil) are ErrInvalidState,
// Start with a done ctx is ErrCanceled, Start succeeds, a second Start and
// Stop(nil) are ErrInvalidState, Stop succeeds and so does a second Stop,
// and Start after Stop is ErrInvalidState. On fresh, another new value: Stop
// before Start succeeds and Start after it is ErrInvalidState. Stop is
// called at t's cleanup too, in case a check ends the test early.
func CheckStartStop[R StartStopper](t *testing.T, r, fresh R, h StartStopHooks[R]) {
	t.Helper()
	//lint:ignore SA1012 testing the nil check
	WantKind(t, "Start(nil)", r.Start(nil), leaseapi.ErrInvalidState) //nolint:staticcheck
	WantKind(t, "Stop(nil)", r.Stop(nil), leaseapi.ErrInvalidState)   //nolint:staticcheck
	if h.BeforeStart != nil {
		h.BeforeStart(r)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	WantKind(t, "Start(canceled)", r.Start(ctx), leaseapi.ErrCanceled)
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = r.Stop(context.Background()) })
	WantKind(t, "second Start", r.Start(t.Context()), leaseapi.ErrInvalidState)
	WantKind(t, "Stop(nil) while started", r.Stop(nil), leaseapi.ErrInvalidState) //nolint:staticcheck
	if h.WhileStarted != nil {
		h.WhileStarted(r)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := r.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	WantKind(t, "Start after Stop", r.Start(t.Context()), leaseapi.ErrInvalidState)
	if h.AfterStop != nil {
		h.AfterStop(r)
	}
	if err := fresh.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	WantKind(t, "Start after an early Stop", fresh.Start(t.Context()), leaseapi.ErrInvalidState)
}

// Start starts r with t's context, failing t if it cannot, and stops it at
// t's cleanup, failing t if Stop returns an error. Register it after the
// client's cleanup (FaultyClient), so that r stops before the client
// closes.
func Start(t testing.TB, r StartStopper) {
	t.Helper()
	if err := r.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}
