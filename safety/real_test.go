package safety_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/internal/faultproxy"
	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// Repetitions of each real-server scenario per backend.
const realReps = 3

// reps is realReps, or one under -short.
func reps() int {
	if testing.Short() {
		return 1
	}
	return realReps
}

// The private servers of the real-server tier, started on first use so
// that the simulation tier and the mutation runs start none. Valkey runs
// with the append-only file but without fsync (appendfsync no) and
// PostgreSQL with synchronous_commit=off and a 10s WAL writer delay: the
// settings under which scenario 8 can lose acknowledged writes. Nothing
// else crashes them, so the other scenarios are unaffected. Valkey's
// append-only file is also the audit of what the server committed; it is
// never rewritten (noRewrite), so it holds the whole history.
var (
	vkOnce sync.Once
	vkSrv  *testserver.RedisServer
	vkErr  error

	pgOnce sync.Once
	pgSrv  *testserver.PostgresServer
	pgErr  error
)

// need skips t when a server is missing, or fails it when the project's
// test command demands real backends (LEASE_REQUIRE_BACKENDS=1).
func need(t *testing.T, name, envVar string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s not available (%v); set %s to run these tests", name, err, envVar)
	if testenv.RequireBackends() {
		t.Fatalf("LEASE_REQUIRE_BACKENDS=1 but %s", msg)
	}
	t.Skip(msg)
}

// noRewrite keeps a Valkey server from rewriting its append-only file,
// which would fold the audit's history into a snapshot.
var noRewrite = []string{"--auto-aof-rewrite-percentage", "0"}

func valkeyServer(t *testing.T) *testserver.RedisServer {
	t.Helper()
	vkOnce.Do(func() {
		vkSrv, vkErr = testserver.StartRedis(testserver.RedisOptions{AppendOnly: true, AppendFsync: "no", Args: noRewrite})
		if vkErr == nil {
			atExit(vkSrv.Stop)
		}
	})
	need(t, "valkey", testserver.EnvValkeyAddr, vkErr)
	return vkSrv
}

func postgresServer(t *testing.T) *testserver.PostgresServer {
	t.Helper()
	pgOnce.Do(func() {
		pgSrv, pgErr = testserver.StartPostgres(testserver.PostgresOptions{
			SynchronousCommit: "off",
			Settings:          []string{"wal_writer_delay=10000ms"},
		})
		if pgErr == nil {
			atExit(pgSrv.Stop)
		}
	})
	need(t, "postgres", testserver.EnvPostgresURL, pgErr)
	return pgSrv
}

// realPolicy: ttl, margin ttl/8, renew every ttl/4, retry 30ms + up to
// 20ms, wait 5s, operation timeout ttl/4.
func realPolicy(t *testing.T, ttl time.Duration) leaseapi.Policy {
	t.Helper()
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{
		TTL: ttl, SafetyMargin: ttl / 8, RenewEvery: ttl / 4,
		Retry: 30 * time.Millisecond, Jitter: 20 * time.Millisecond, Wait: 5 * time.Second,
		OperationTimeout: ttl / 4,
	})
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// realEnv is one repetition of a real-server scenario on one backend: its
// own key prefix or schema, a history, and clients that each reach the
// server through their own fault proxy.
type realEnv struct {
	t      *testing.T
	kind   string // "valkey" or "postgres"
	hist   *simtest.History
	policy leaseapi.Policy

	vk     *testserver.RedisServer
	prefix string

	pg     *testserver.PostgresServer
	schema string

	// oneConn limits each PostgreSQL store to one pooled connection, so
	// that a scenario's warm-up prepares its statements on the connection
	// its cut request then uses (scenarios 3 to 5).
	oneConn bool

	// calls records every mutation the env's stores were asked for, for
	// checker C4 against the server's audit.
	calls *callLog

	mu        sync.Mutex
	resources map[leaseapi.Key]*simtest.Resource
}

// realClient is one client: a fault proxy, a store behind it and a
// runtime Client on the store (batching renewals when the store can).
type realClient struct {
	name  string
	proxy *faultproxy.Proxy
	store leaseapi.Backend
	c     *runtime.Client
	// changes are the client's handle transitions, as its supervisors
	// made them (ClientOptions.OnStateChange).
	changes *backendtest.Log[runtime.StateChange]
	hasher  *runtime.KeyHasher // names the key of a change
}

// forEachBackend runs scenario realReps times on Valkey and on PostgreSQL,
// serially, each repetition in a fresh namespace, and checks the history
// and, once every client of the repetition has closed, the server's audit
// (checkAudit).
func forEachBackend(t *testing.T, ttl time.Duration, scenario func(e *realEnv)) {
	for _, kind := range []string{"valkey", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			for rep := range reps() {
				t.Run(fmt.Sprint("rep=", rep), func(t *testing.T) {
					e := newRealEnv(t, kind, ttl)
					// Registered before any client: runs after every
					// client has closed (and released), before the
					// schema is dropped.
					t.Cleanup(func() { e.checkAudit(false) })
					start := time.Now()
					scenario(e)
					if vs := e.hist.Check(); len(vs) > 0 {
						t.Errorf("%d history violations, first: %v", len(vs), vs[0])
						e.writeHistory()
					}
					t.Logf("%s rep %d: %v", kind, rep, time.Since(start).Round(time.Millisecond))
				})
			}
		})
	}
}

// newRealEnv is a fresh env on the shared private server of kind, in its
// own key prefix or schema (with the audit trigger installed).
func newRealEnv(t *testing.T, kind string, ttl time.Duration) *realEnv {
	e := &realEnv{t: t, kind: kind, hist: simtest.NewHistory(), policy: realPolicy(t, ttl), resources: map[leaseapi.Key]*simtest.Resource{}, calls: &callLog{}}
	switch kind {
	case "valkey":
		e.vk = valkeyServer(t)
		e.prefix = randomName("safety-")
	case "postgres":
		e.pg = postgresServer(t)
		e.schema = randomName("safety_")
		e.migrate()
	}
	return e
}

func (e *realEnv) writeHistory() {
	dir := e.t.TempDir()
	if d := getenv(envArtifacts); d != "" {
		dir = d
	}
	path := fmt.Sprintf("%s/%s-history.json", dir, sanitize(e.t.Name()))
	if err := writeJSONFile(path, e.hist.WriteJSON); err != nil {
		e.t.Logf("history artifact: %v", err)
		return
	}
	e.t.Logf("history written to %s", path)
}

func (e *realEnv) migrate() {
	t := e.t
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, e.pg.URL())
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, postgres.Options{Schema: e.schema}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	e.installAudit(ctx, pool)
	// The server loses unflushed commits when killed (scenario 8): make
	// the schema durable now.
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		t.Fatalf("CHECKPOINT: %v", err)
	}
	schema := e.schema
	url := e.pg.URL()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
}

// openStore returns a store of this env's namespace reaching the server at
// addr ("" for the server itself), closed when the test ends. Its
// mutations are recorded in e.calls.
func (e *realEnv) openStore(addr string) leaseapi.Backend {
	name := "direct"
	if addr != "" {
		name = "via " + addr
	}
	return &recorded{b: e.rawStore(addr), name: name, log: e.calls}
}

// rawStore is openStore without the recording.
func (e *realEnv) rawStore(addr string) leaseapi.Backend {
	t := e.t
	switch e.kind {
	case "valkey":
		if addr == "" {
			addr = e.vk.Addr()
		}
		// valkey-go connects in NewClient, and its handshake is bounded
		// by ConnWriteTimeout (300ms, so that a blackholed connection is
		// noticed within a TTL): on a loaded machine a handshake through
		// the proxy can take longer. Nothing of the scenario has happened
		// yet, so setup tries again, for up to 10s, as acquire does.
		var c vk.Client
		err := eventually(10*time.Second, func() (err error) {
			c, err = vk.NewClient(vk.ClientOption{
				InitAddress: []string{addr}, DisableCache: true,
				ConnWriteTimeout: 300 * time.Millisecond, PipelineMultiplex: -1,
			})
			return err
		})
		if err != nil {
			t.Fatalf("valkey client: %v", err)
		}
		t.Cleanup(c.Close)
		s, err := valkey.New(c, valkey.Options{Prefix: e.prefix})
		if err != nil {
			t.Fatalf("valkey.New: %v", err)
		}
		t.Cleanup(s.Close)
		return s
	default:
		url := e.pg.URL()
		if addr != "" {
			url = e.pg.URLVia(addr)
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			t.Fatalf("parse url: %v", err)
		}
		if e.oneConn {
			cfg.MaxConns = 1
		}
		cfg.ConnConfig.ConnectTimeout = time.Second
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatalf("pool: %v", err)
		}
		t.Cleanup(pool.Close)
		s, err := postgres.New(pool, postgres.Options{Schema: e.schema})
		if err != nil {
			t.Fatalf("postgres.New: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// client makes a client named name behind its own fault proxy.
func (e *realEnv) client(name string) *realClient {
	t := e.t
	target := ""
	switch e.kind {
	case "valkey":
		target = e.vk.Addr()
	default:
		target = e.pg.Addr()
	}
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatalf("fault proxy: %v", err)
	}
	s := e.openStore(p.Addr())
	s.(*recorded).name = name
	// Cleanups run last-registered first: the client releases through the
	// proxy, then the proxy resets what is left (a connection stuck since
	// a blackhole would otherwise hold up the pool's close), then the
	// store and its connections close.
	t.Cleanup(func() { _ = p.Close() })
	changes := &backendtest.Log[runtime.StateChange]{}
	secret := make([]byte, runtime.MinKeyHashSecret)
	_, _ = rand.Read(secret)
	hasher, err := runtime.NewKeyHasher(secret)
	if err != nil {
		t.Fatalf("NewKeyHasher: %v", err)
	}
	c, err := runtime.NewClient(s, runtime.ClientOptions{OnStateChange: changes.Add, KeyHasher: hasher})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() {
		p.Pass()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	rc := &realClient{name: name, proxy: p, store: s, c: c, changes: changes, hasher: hasher}
	e.warm(rc)
	return rc
}

// warm readies a fresh client before its scenario starts: it connects and
// has the store check its schema (a read, repeated until it succeeds),
// then acquires, renews, validates and releases a key of its own, so that
// the acquisition, renewal, validation, release and inspection statements
// or scripts are prepared on the connection (and the store has learnt the
// server's clock). On a loaded machine a fresh connection's first
// statements can take longer than OperationTimeout (250ms for a 1s TTL):
// an acquisition, renewal or validation that failed (not sent, its
// outcome unknown, or a validation that timed out after it was sent:
// PostgreSQL's read reports the context's error) is repeated on another
// warm key, for up to 10s. Warm
// keys are nobody else's, and their grants are not scenario history.
func (e *realEnv) warm(c *realClient) {
	e.t.Helper()
	ctx := context.Background()
	in := c.store.(leaseapi.Inspector)
	warmKey := func(i int) leaseapi.Key { return leaseapi.MustKey("warm", fmt.Sprint(c.name, "-", i)) }
	if err := eventually(10*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, _, err := in.Inspect(cctx, warmKey(0))
		return err
	}); err != nil {
		e.t.Fatalf("%s: warm-up Inspect: %v", c.name, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		step := "TryAcquire"
		h, err := c.c.TryAcquire(ctx, warmKey(i), e.policy)
		if err == nil {
			if step, err = "Renew", h.Renew(ctx); err == nil {
				step, err = "Validate", h.Validate(ctx)
			}
			if rerr := h.Release(ctx); rerr != nil {
				e.t.Logf("%s: warm-up Release: %v", c.name, rerr)
			}
			if err == nil {
				return
			}
		}
		if k := leaseapi.Kind(err); (k != leaseapi.ErrBackendUnavailable && k != leaseapi.ErrAmbiguousOutcome && k != leaseapi.ErrTimeout) || time.Now().After(deadline) {
			e.t.Fatalf("%s: warm-up %s: %v", c.name, step, err)
		}
		e.t.Logf("%s: warm-up %s on warm key %d: %v (trying another)", c.name, step, i, err)
		pause(ctx, 20*time.Millisecond)
	}
}

func (e *realEnv) resource(k leaseapi.Key) *simtest.Resource {
	e.mu.Lock()
	defer e.mu.Unlock()
	r := e.resources[k]
	if r == nil {
		r = simtest.NewResource(k.String(), e.hist)
		e.resources[k] = r
	}
	return r
}

func (e *realEnv) admit(h *runtime.Handle) bool {
	if h.State() != leaseapi.StateActive {
		return false
	}
	e.hist.Admit(h.Key(), h.Owner(), h.Token(), time.Now())
	return true
}

func (e *realEnv) write(h *runtime.Handle, v string) error {
	return e.resource(h.Key()).Write(h.Owner(), h.Token(), v, time.Now())
}

// acquire makes c acquire k at once and records the grant; failing to
// acquire fails the test.
// acquire is a scenario's setup: c takes k, which nobody holds. An attempt
// that failed before anything was sent (ErrBackendUnavailable: on a
// loaded machine a fresh pool's first connection can take longer than
// OperationTimeout) changed nothing and is repeated, for up to 10s, so that
// setup does not depend on how fast the machine is; any other error fails.
func (e *realEnv) acquire(c *realClient, k leaseapi.Key) *runtime.Handle {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := c.c.TryAcquire(context.Background(), k, e.policy)
		if err == nil {
			e.granted(h)
			return h
		}
		if leaseapi.Kind(err) != leaseapi.ErrBackendUnavailable || time.Now().After(deadline) {
			e.t.Fatalf("%s: TryAcquire: %v", c.name, err)
		}
		pause(context.Background(), 20*time.Millisecond)
	}
}

func (e *realEnv) granted(h *runtime.Handle) {
	e.hist.Grant(h.Key(), h.Owner(), h.Token(), time.Now())
}

func (e *realEnv) wantKind(what string, err, want error) {
	e.t.Helper()
	if got := leaseapi.Kind(err); got != want {
		e.t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

// waitCut waits until an armed cut has fired: the server has replied to
// the cut request and the client was reset. A cut that never fires (its
// request was never sent) fails the test instead of hanging it.
func waitCut(t *testing.T, cut <-chan struct{}) {
	t.Helper()
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the cut did not fire within 10s: the request under test was not sent")
	}
}

// eventually retries op (a client reconnecting after a fault) until it
// succeeds or limit passes.
func eventually(limit time.Duration, op func() error) error {
	end := time.Now().Add(limit)
	for {
		err := op()
		if err == nil || time.Now().After(end) {
			return err
		}
		pause(context.Background(), 20*time.Millisecond)
	}
}

// TestRealContention is scenario 1 on real servers: 8 clients (each its
// own connection) contend for 3 keys for 3s with TTL 1s, half of the
// holders managed; the history checker stays clean.
func TestRealContention(t *testing.T) {
	forEachBackend(t, time.Second, func(e *realEnv) {
		keys := []leaseapi.Key{leaseapi.MustKey("sc1", "a"), leaseapi.MustKey("sc1", "b"), leaseapi.MustKey("sc1", "c")}
		ctx, stop := context.WithTimeout(context.Background(), 3*time.Second)
		defer stop()
		var wg sync.WaitGroup
		for i := range 8 {
			c := e.client(fmt.Sprintf("c%d", i))
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					h, err := c.c.Acquire(ctx, keys[(i+n)%len(keys)], e.policy)
					if err != nil {
						continue
					}
					e.granted(h)
					if n%2 == 0 {
						if _, err := h.StartManaged(ctx); err != nil {
							_ = h.Release(context.Background())
							continue
						}
					}
					for step := 0; step < 1+(i+n)%5 && ctx.Err() == nil; step++ {
						if e.admit(h) {
							_ = e.write(h, c.name)
						}
						pause(ctx, time.Duration(50+((i*7+n*13+step*29)%250))*time.Millisecond)
					}
					pause(context.Background(), time.Millisecond)
					_ = h.Release(context.Background())
				}
			})
		}
		wg.Wait()
		var grants int
		for _, ev := range e.hist.Events() {
			if ev.Kind == simtest.Granted {
				grants++
			}
		}
		if grants < 8 {
			t.Errorf("only %d grants in 3s: too thin to prove anything", grants)
		}
	})
}

// TestRealRenewReplyLost is scenario 3 on real servers: a renewal whose
// request reaches the server and commits but whose reply is lost
// (faultproxy.CutAfterRequest) is ErrAmbiguousOutcome; the handle is
// Uncertain at once and its deadline is not extended although the server
// extended the grant; it is Active again only after a confirming Validate.
func TestRealRenewReplyLost(t *testing.T) {
	forEachBackend(t, 2*time.Second, func(e *realEnv) {
		t := e.t
		e.oneConn = true
		k := leaseapi.MustKey("sc3", "k")
		a := e.client("a")
		direct := e.openStore("").(leaseapi.Inspector)
		ctx := context.Background()
		h := e.acquire(a, k)
		// Warm the renew and validate statements or scripts on the
		// connection, so that the cut hits the renewal itself.
		if err := h.Renew(ctx); err != nil {
			t.Fatalf("warm Renew: %v", err)
		}
		if err := h.Validate(ctx); err != nil {
			t.Fatalf("warm Validate: %v", err)
		}
		before, _, err := direct.Inspect(ctx, k)
		if err != nil {
			t.Fatalf("Inspect: %v", err)
		}
		// Expiries have millisecond resolution (Valkey rounds a grant's
		// expiry up to the millisecond): let the clock move on by more
		// than one, so that a renewal that commits must move ExpiresAt
		// and the check below can see it.
		pause(ctx, 2*time.Millisecond)
		deadline := h.Deadline()
		// The cut picks the renewal by its owner id: a ping the client
		// library sends first (pgxpool pings a connection idle for over a
		// second, as one can be on a loaded machine) passes.
		cut := a.proxy.CutAfterRequestContaining([]byte(h.Owner()))
		err = h.Renew(ctx)
		waitCut(t, cut)
		e.wantKind("Renew with its reply cut", err, leaseapi.ErrAmbiguousOutcome)
		if st := h.State(); st != leaseapi.StateUncertain {
			t.Errorf("after the cut renewal: state %v, want uncertain", st)
		}
		if !h.Deadline().Equal(deadline) {
			t.Errorf("the ambiguous renewal moved the deadline by %v", h.Deadline().Sub(deadline))
		}
		after, held, err := direct.Inspect(ctx, k)
		if err != nil || !held || after.Token != h.Token() {
			t.Fatalf("server after the cut: held %v token %d (%v)", held, after.Token, err)
		}
		if !after.ExpiresAt.After(before.ExpiresAt) {
			t.Errorf("the cut renewal did not commit on the server: the scenario did not happen")
		}
		if e.admit(h) {
			t.Errorf("admitted while uncertain")
		}
		// The confirming read (the client reconnects first).
		if err := eventually(e.policy.TTL()/2, func() error { return h.Validate(ctx) }); err != nil {
			t.Fatalf("Validate after the cut: %v (state %v)", err, h.State())
		}
		if !e.admit(h) {
			t.Errorf("not Active after a confirming Validate: %v", h.State())
		}
		if !h.Deadline().Equal(deadline) {
			t.Errorf("Validate moved the deadline")
		}
		if err := h.Renew(ctx); err != nil {
			t.Errorf("Renew after recovery: %v", err)
		} else if !h.Deadline().After(deadline) {
			t.Errorf("a confirmed renewal did not extend the deadline")
		}
		_ = h.Release(ctx)
	})
}

// TestRealPartition is scenario 6 on real servers: a managed holder behind
// a blackholed proxy for 3×TTL turns Uncertain, then Expired no later than
// the partition's start + TTL - margin (its last confirmed renewal was
// sent before that), with exactly one Loss; after the heal the other
// client acquires with a higher token and the partitioned client can
// acquire again.
//
// The states are the transitions the supervisor made (the client's
// OnStateChange hook), not samples: a sampling loop on a loaded machine
// can sleep through the whole Uncertain phase. That phase lasts
// TTL - margin - RenewEvery - OperationTimeout (375ms here) when the
// renewal after the partition's start fails on time; a process stalled for
// longer than that (backendtest.LagProbe) may send the renewal that the
// partition cuts so late that it fails only at the deadline, and go from
// Active to Expired directly, which fails closed just the same. Such a run says so in the log instead of failing;
// any other path fails. The Loss is due when the supervisor wakes at the
// deadline: by the bound plus 100ms plus the worst timer lateness seen.
func TestRealPartition(t *testing.T) {
	forEachBackend(t, time.Second, func(e *realEnv) {
		t := e.t
		p := e.policy
		window := p.TTL() - p.SafetyMargin() - p.RenewEvery() - p.OperationTimeout()
		lag := backendtest.StartLagProbe(t)
		a, b := e.client("a"), e.client("b")
		ctx := context.Background()
		var (
			k    leaseapi.Key
			h    *runtime.Handle
			m    *runtime.Managed
			from int // a's transitions before h's
		)
		for attempt := 1; ; attempt++ {
			// Setup: an Active managed lease. On a loaded machine managed
			// renewal can miss a TTL before anything of the scenario
			// happened (a stalled process, a server slower than
			// OperationTimeout): setup then starts again on a fresh key,
			// at most three times.
			k = leaseapi.MustKey("sc6", fmt.Sprint("k", attempt))
			lag.Reset()
			from = len(a.changes.All())
			h = e.acquire(a, k)
			var err error
			if m, err = h.StartManaged(ctx); err != nil {
				t.Fatalf("StartManaged: %v", err)
			}
			pause(ctx, p.TTL()) // a few managed renewals
			if e.admit(h) {
				break
			}
			st := h.Status()
			if attempt == 3 {
				t.Fatalf("not Active before the partition in %d attempts: %v (%v), timer lateness up to %v", attempt, st.State, st.Err, lag.Worst())
			}
			t.Logf("setup attempt %d: not Active before the partition: %v (%v), timer lateness up to %v; again on a fresh key", attempt, st.State, st.Err, lag.Worst())
			_ = m.Stop(ctx)
			_ = h.Release(ctx)
		}
		// lag keeps what it saw since the attempt started: a stall just
		// before the partition delays the renewal it is about to cut.
		a.proxy.Blackhole()
		start := time.Now()
		bound := start.Add(p.TTL() - p.SafetyMargin())
		for time.Since(start) < 3*p.TTL() {
			st := h.State()
			if !time.Now().Before(bound) && st != leaseapi.StateExpired {
				t.Errorf("state %v %v after the bound", st, time.Since(bound))
			}
			if h.Deadline().After(bound) {
				t.Errorf("deadline %v past the partition's start + TTL - margin", h.Deadline().Sub(bound))
			}
			if e.admit(h) {
				_ = e.write(h, "a")
			}
			pause(ctx, 5*time.Millisecond)
		}
		stalled := lag.Worst()
		// The hook runs on a goroutine of its own: wait for the expiry
		// to be delivered.
		var path []string
		for waited := time.Duration(0); ; waited += 10 * time.Millisecond {
			path = path[:0]
			for _, c := range a.changes.All()[from:] {
				if c.KeyHash == a.hasher.Hash(k) && c.Token == h.Token() {
					path = append(path, c.From.String()+"->"+c.To.String())
				}
			}
			if len(path) > 0 && strings.HasSuffix(path[len(path)-1], "->expired") || waited >= 5*time.Second {
				break
			}
			pause(ctx, 10*time.Millisecond)
		}
		switch got := fmt.Sprint(path); {
		case got == "[active->uncertain uncertain->expired]":
		case got == "[active->expired]" && stalled >= window:
			t.Logf("states during the partition: %v; this process stalled for up to %v, longer than the %v the Uncertain phase lasts", path, stalled, window)
		default:
			t.Errorf("states during the partition: %v, want [active->uncertain uncertain->expired] (timer lateness up to %v)", path, stalled)
		}
		a.proxy.Pass()
		healed := time.Now()
		select {
		case l, ok := <-m.Loss():
			if !ok || l.State != leaseapi.StateExpired {
				t.Errorf("Loss: %+v (ok %v), want one in state expired", l, ok)
			} else if late := l.At.Sub(bound); late > 100*time.Millisecond+stalled {
				t.Errorf("Loss at %v after the bound (timer lateness up to %v)", late, stalled)
			}
		case <-time.After(time.Second):
			t.Errorf("no Loss")
		}
		select {
		case l, ok := <-m.Loss():
			if ok {
				t.Errorf("a second Loss: %+v", l)
			}
		case <-time.After(time.Second):
			t.Errorf("Loss channel not closed")
		}
		hb := e.acquire(b, k)
		if hb.Token() <= h.Token() {
			t.Errorf("b's token %d not above a's %d", hb.Token(), h.Token())
		}
		if e.admit(hb) {
			_ = e.write(hb, "b")
		}
		pause(ctx, time.Millisecond)
		_ = hb.Release(ctx)
		// C6: a fresh acquisition through the healed link.
		fresh, err := a.c.Acquire(ctx, k, e.policy)
		if err != nil {
			t.Fatalf("fresh acquire %v after the heal: %v", time.Since(healed).Round(time.Millisecond), err)
		}
		t.Logf("fresh acquire through the healed link %v after the heal", time.Since(healed).Round(time.Millisecond))
		e.granted(fresh)
		if fresh.Token() <= hb.Token() {
			t.Errorf("fresh token %d not above %d", fresh.Token(), hb.Token())
		}
		_ = fresh.Release(ctx)
	})
}

// TestRealPausedHolder is scenario 2 on real servers: a holder admitted to
// protected work stops acting for 2×TTL (a managed holder's connection is
// blackholed meanwhile, as a stopped process's would be); another client
// acquires and writes. On resume the handle reports Expired first, the
// write with the old token is rejected by the fenced resource, and the new
// holder's token is higher.
func TestRealPausedHolder(t *testing.T) {
	forEachBackend(t, time.Second, func(e *realEnv) {
		t := e.t
		k := leaseapi.MustKey("sc2", "k")
		a, b := e.client("a"), e.client("b")
		ctx := context.Background()
		h := e.acquire(a, k)
		managed := t.Name()[len(t.Name())-1]%2 == 0 // reps 0 and 2 managed
		var m *runtime.Managed
		if managed {
			var err error
			if m, err = h.StartManaged(ctx); err != nil {
				t.Fatalf("StartManaged: %v", err)
			}
		}
		if !e.admit(h) {
			t.Fatalf("not Active: %v", h.State())
		}
		if err := e.write(h, "a-before"); err != nil {
			t.Fatalf("write: %v", err)
		}
		if managed {
			a.proxy.Blackhole()
		}
		var hb *runtime.Handle
		var wg sync.WaitGroup
		wg.Go(func() {
			got, err := b.c.Acquire(ctx, k, e.policy)
			if err != nil {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				rec, held, ierr := b.store.(leaseapi.Inspector).Inspect(rctx, k)
				t.Errorf("b: Acquire: %v (inspect: held %v token %d expires in %v, %v; a's token %d)", err, held, rec.Token, time.Until(rec.ExpiresAt), ierr, h.Token())
				return
			}
			e.granted(got)
			if e.admit(got) {
				if err := e.write(got, "b"); err != nil {
					t.Errorf("b: write: %v", err)
				}
			}
			hb = got
		})
		pause(ctx, 2*e.policy.TTL()) // the pause: a does nothing
		if st := h.State(); st != leaseapi.StateExpired {
			t.Errorf("a on resume: state %v, want expired", st)
		}
		wg.Wait()
		if hb == nil {
			t.Fatal("b never acquired")
		}
		e.wantKind("a: write with the old token after the pause", e.write(h, "a-after"), leaseapi.ErrStaleOwner)
		if hb.Token() <= h.Token() {
			t.Errorf("b's token %d not above a's %d", hb.Token(), h.Token())
		}
		if managed {
			a.proxy.Pass()
			select {
			case l, ok := <-m.Loss():
				if !ok || l.State != leaseapi.StateExpired {
					t.Errorf("Loss: %+v (ok %v), want expired", l, ok)
				}
			case <-time.After(time.Second):
				t.Errorf("no Loss")
			}
		}
		_ = hb.Release(ctx)
	})
}

func getenv(k string) string { return os.Getenv(k) }

// sanitize makes a test name usable as a file name.
func sanitize(s string) string { return strings.NewReplacer("/", "_", " ", "_", "=", "-").Replace(s) }

func writeJSONFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestRealCrashRestart is scenario 8: a server that acknowledged grants is
// killed (SIGKILL) right after them and restarted. Depending on its
// persistence settings it may have lost the latest acquisitions, so that
// it hands out a token again. Whatever happened:
//
//   - the fenced resource never accepts a token lower than one it accepted
//     (nor an equal one from another owner): a new holder with a regressed
//     token is refused;
//   - a client that was granted a higher token before the crash refuses a
//     regressed grant with ErrFencingRegression and never reports it
//     Active;
//   - whether the token regressed is logged for each setting.
//
// Settings: Valkey with appendonly yes and appendfsync no (a process crash
// keeps what was written to the page cache; a machine crash would not),
// Valkey without persistence (tokens restart at 1: the regression must
// happen and be caught), PostgreSQL with synchronous_commit=off (commits
// still in the WAL buffers die with the server).
func TestRealCrashRestart(t *testing.T) {
	cases := []struct {
		name      string
		kind      string
		setup     func(t *testing.T, e *realEnv)
		crash     func(t *testing.T, e *realEnv)
		mustLose  bool
		durableOK bool // a regression here would be a durability bug
	}{
		{
			name: "valkey-appendfsync-no", kind: "valkey",
			setup: func(t *testing.T, e *realEnv) { e.vk = valkeyServer(t) },
			crash: func(t *testing.T, e *realEnv) { e.vk.Kill(); restart(t, e.vk.Restart) },
		},
		{
			name: "valkey-no-persistence", kind: "valkey", mustLose: true,
			setup: func(t *testing.T, e *realEnv) {
				valkeyServer(t) // skip or fail as the others do
				s, err := testserver.StartRedis(testserver.RedisOptions{})
				if err != nil {
					t.Fatalf("private valkey: %v", err)
				}
				t.Cleanup(s.Stop)
				e.vk = s
			},
			crash: func(t *testing.T, e *realEnv) { e.vk.Kill(); restart(t, e.vk.Restart) },
		},
		{
			name: "valkey-appendfsync-always", kind: "valkey", durableOK: true,
			setup: func(t *testing.T, e *realEnv) {
				valkeyServer(t)
				s, err := testserver.StartRedis(testserver.RedisOptions{AppendOnly: true, AppendFsync: "always", Args: noRewrite})
				if err != nil {
					t.Fatalf("private valkey: %v", err)
				}
				t.Cleanup(s.Stop)
				e.vk = s
			},
			crash: func(t *testing.T, e *realEnv) { e.vk.Kill(); restart(t, e.vk.Restart) },
		},
		{
			name: "postgres-synchronous-commit-on", kind: "postgres", durableOK: true,
			setup: func(t *testing.T, e *realEnv) {
				postgresServer(t)
				e.pg = durablePostgres(t)
				e.schema = randomName("safety_")
				e.migrate()
			},
			crash: func(t *testing.T, e *realEnv) { e.pg.Kill(); restart(t, e.pg.Restart) },
		},
		{
			name: "postgres-synchronous-commit-off", kind: "postgres",
			setup: func(t *testing.T, e *realEnv) {
				e.pg = postgresServer(t)
				e.schema = randomName("safety_")
				e.migrate()
			},
			crash: func(t *testing.T, e *realEnv) { e.pg.Kill(); restart(t, e.pg.Restart) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for rep := range reps() {
				t.Run(fmt.Sprint("rep=", rep), func(t *testing.T) {
					e := &realEnv{t: t, kind: tc.kind, hist: simtest.NewHistory(), policy: realPolicy(t, time.Second),
						resources: map[leaseapi.Key]*simtest.Resource{}, prefix: randomName("safety-"), calls: &callLog{}}
					tc.setup(t, e)
					regressed := crashRun(e, tc.crash)
					crashAudit(e, regressed, tc.durableOK)
					if tc.durableOK && regressed {
						t.Errorf("the token regressed across a kill although every acknowledged commit is durable")
					}
					if tc.mustLose && !regressed {
						t.Errorf("a server without persistence kept its tokens across a kill: the scenario did not happen")
					}
					// A regressed token shows in the history as a grant
					// order violation: that is the server's data loss this
					// scenario reports, not the library's. Everything else
					// (overlap, ungranted admission, stale write) must be
					// clean.
					var bad []simtest.Violation
					for _, v := range e.hist.Check() {
						if v.Rule != "grant-order" || !regressed {
							bad = append(bad, v)
						}
					}
					if len(bad) > 0 {
						t.Errorf("%d history violations, first: %v", len(bad), bad[0])
						e.writeHistory()
					}
				})
			}
		})
	}
}

var (
	pgDurableOnce sync.Once
	pgDurable     *testserver.PostgresServer
	pgDurableErr  error
)

// durablePostgres is a second private PostgreSQL server with the default
// synchronous_commit=on (fsync stays off: a process kill loses nothing
// written, only a machine crash would).
func durablePostgres(t *testing.T) *testserver.PostgresServer {
	t.Helper()
	pgDurableOnce.Do(func() {
		pgDurable, pgDurableErr = testserver.StartPostgres(testserver.PostgresOptions{})
		if pgDurableErr == nil {
			atExit(pgDurable.Stop)
		}
	})
	need(t, "postgres", testserver.EnvPostgresURL, pgDurableErr)
	return pgDurable
}

// crashAudit checks the audit of a crash run. The log is what the
// restarted server persisted: C1 must hold on it (a crash loses a suffix
// of the commits, never a middle). C4 allows acknowledged calls missing
// from it ("lost") only where the setting may lose writes; a regressed
// token must show as at least one lost acknowledged call, since the grants
// it repeats were acknowledged and are gone from the log too.
func crashAudit(e *realEnv, regressed, durable bool) {
	res, ok := e.checkAudit(!durable)
	if !ok {
		return
	}
	if regressed && len(res.lost) == 0 {
		e.t.Errorf("the token regressed but the audit lost no acknowledged call: the audit does not see the crash's loss")
	}
	if len(res.lost) > 0 {
		e.t.Logf("lost by the crash: %d acknowledged calls, first: %v", len(res.lost), res.lost[0])
	}
}

func restart(t *testing.T, fn func() error) {
	t.Helper()
	if err := fn(); err != nil {
		t.Fatalf("restart: %v", err)
	}
}

// crashRun: client x acquires, writes and releases k a few times, the
// server is crashed and restarted at once, then a fresh client y (a new
// process: no memory of tokens) and x acquire again. It reports whether
// the server's token went back.
func crashRun(e *realEnv, crash func(*testing.T, *realEnv)) (regressed bool) {
	t := e.t
	ctx := context.Background()
	k := leaseapi.MustKey("sc8", "k")
	direct := e.openStore("")
	x, err := runtime.NewClient(e.openStore(""), runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close(context.Background()) })
	var high leaseapi.Token
	for i := range 20 {
		h, err := x.Acquire(ctx, k, e.policy)
		if err != nil {
			t.Fatalf("x: Acquire %d: %v", i, err)
		}
		e.granted(h)
		if e.admit(h) {
			if err := e.write(h, "x"); err != nil {
				t.Fatalf("x: write with token %d: %v", h.Token(), err)
			}
		}
		high = h.Token()
		pause(ctx, time.Millisecond)
		if err := h.Release(ctx); err != nil {
			t.Fatalf("x: Release: %v", err)
		}
	}
	crash(t, e)

	// y: a new process after the restart.
	y, err := runtime.NewClient(e.openStore(""), runtime.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = y.Close(context.Background()) })
	hy, err := y.Acquire(ctx, k, e.policy)
	if err != nil {
		t.Fatalf("y: Acquire after the restart: %v", err)
	}
	e.granted(hy)
	regressed = hy.Token() <= high
	t.Logf("%s: last token before the crash %d, first after %d: regressed %v", e.kind, high, hy.Token(), regressed)
	werr := e.write(hy, "y")
	switch {
	case regressed:
		e.wantKind("y: write with a regressed token", werr, leaseapi.ErrStaleOwner)
	case werr != nil:
		t.Errorf("y: write with a higher token: %v", werr)
	}
	if _, tok, _ := e.resource(k).Value(); tok < high {
		t.Errorf("resource high-water mark went back from %d to %d", high, tok)
	}
	pause(ctx, time.Millisecond)
	if err := hy.Release(ctx); err != nil {
		t.Errorf("y: Release: %v", err)
	}

	// x remembers token high: a grant at or below it is refused.
	hx, err := x.Acquire(ctx, k, e.policy)
	var rec leaseapi.Record
	ierr := eventually(5*time.Second, func() error {
		var err error
		rec, _, err = direct.(leaseapi.Inspector).Inspect(ctx, k)
		return err
	})
	if ierr != nil {
		t.Fatalf("Inspect: %v", ierr)
	}
	switch {
	case rec.Token <= high:
		e.wantKind(fmt.Sprintf("x: grant of token %d after it held %d", rec.Token, high), err, leaseapi.ErrFencingRegression)
		if hx != nil {
			t.Errorf("x got a handle for a regressed token %d (state %v)", hx.Token(), hx.State())
		}
	case err != nil:
		t.Errorf("x: Acquire of token %d after it held %d: %v", rec.Token, high, err)
	default:
		e.granted(hx)
		if e.admit(hx) {
			if err := e.write(hx, "x-again"); err != nil {
				t.Errorf("x: write with token %d: %v", hx.Token(), err)
			}
		}
		_ = hx.Release(ctx)
	}
	return regressed
}

// TestRealAcquireReplyLost is scenario 4 on real servers: the request of
// an acquisition commits on the server but its reply is cut. The runtime
// either adopts the grant by owner id (the handle carries the committed
// token) or, if it cannot read the key in time, returns
// ErrAmbiguousOutcome and hands out nothing; then the orphan grant blocks
// the key until its TTL. Either way another client's later grant has a
// higher token, and nothing overlaps.
func TestRealAcquireReplyLost(t *testing.T) {
	forEachBackend(t, time.Second, func(e *realEnv) {
		t := e.t
		e.oneConn = true
		k := leaseapi.MustKey("sc4", "k")
		a, b := e.client("a"), e.client("b")
		direct := e.openStore("").(leaseapi.Inspector)
		ctx := context.Background()
		// e.client warmed the acquire, inspect and release statements or
		// scripts on a's connection.
		// The cut picks the acquisition by its key (its owner id is drawn
		// inside TryAcquire), not a ping of the client library.
		cut := a.proxy.CutAfterRequestContaining([]byte(k.String()))
		sent := time.Now()
		// The acquisition was sent before the cut fired (the server had
		// replied); the resolving read comes after.
		cutAt := make(chan time.Time, 1)
		go func() { <-cut; cutAt <- time.Now() }()
		ha, err := a.c.TryAcquire(ctx, k, e.policy)
		waitCut(t, cut)
		fired := <-cutAt
		rec, held, ierr := direct.Inspect(ctx, k)
		if ierr != nil || !held {
			t.Fatalf("server after the cut: held %v (%v): the acquisition did not commit, the scenario did not happen", held, ierr)
		}
		switch {
		case err == nil:
			e.granted(ha)
			if ha.Token() != rec.Token || ha.Owner() != rec.Owner {
				t.Errorf("adopted token %d owner %q, committed token %d owner %q", ha.Token(), ha.Owner(), rec.Token, rec.Owner)
			}
			if ha.Deadline().After(fired.Add(e.policy.TTL() - e.policy.SafetyMargin())) {
				t.Errorf("adopted grant's deadline %v past the lost reply + TTL - margin", ha.Deadline().Sub(fired))
			}
			t.Logf("lost reply resolved: adopted token %d", ha.Token())
		default:
			e.wantKind("unresolved lost acquisition", err, leaseapi.ErrAmbiguousOutcome)
			if ha != nil {
				t.Errorf("a handle returned with an error")
			}
			t.Logf("lost reply unresolved (%v): orphan token %d", leaseapi.Kind(err), rec.Token)
		}
		var wg sync.WaitGroup
		var hb *runtime.Handle
		wg.Go(func() {
			got, err := b.c.Acquire(ctx, k, e.policy)
			if err != nil {
				t.Errorf("b: Acquire: %v", err)
				return
			}
			e.granted(got)
			if e.admit(got) {
				_ = e.write(got, "b")
			}
			hb = got
		})
		for ha != nil && e.admit(ha) {
			_ = e.write(ha, "a")
			pause(ctx, 5*time.Millisecond)
		}
		wg.Wait()
		if hb == nil {
			t.FailNow()
		}
		if hb.Token() <= rec.Token {
			t.Errorf("b's token %d not above the committed %d", hb.Token(), rec.Token)
		}
		if time.Since(sent) < e.policy.TTL()-e.policy.SafetyMargin() {
			t.Errorf("b acquired %v after the lost acquisition, before its TTL", time.Since(sent))
		}
		pause(ctx, time.Millisecond)
		_ = hb.Release(ctx)
	})
}

// TestRealReleaseReplyLost is scenario 5 on real servers: a release that
// commits but whose reply is cut leaves the handle Uncertain; another
// client then acquires, and the first client's retried Release is refused
// (ErrStaleOwner) and cannot remove the new holder's lease.
func TestRealReleaseReplyLost(t *testing.T) {
	forEachBackend(t, 2*time.Second, func(e *realEnv) {
		t := e.t
		e.oneConn = true
		k := leaseapi.MustKey("sc5", "k")
		a, b := e.client("a"), e.client("b")
		direct := e.openStore("").(leaseapi.Inspector)
		ctx := context.Background()
		// e.client warmed the release statement or script on a's connection.
		ha := e.acquire(a, k)
		if e.admit(ha) {
			_ = e.write(ha, "a")
		}
		pause(ctx, time.Millisecond)
		cut := a.proxy.CutAfterRequestContaining([]byte(ha.Owner())) // not a ping
		err := ha.Release(ctx)
		waitCut(t, cut)
		e.wantKind("a: Release with its reply cut", err, leaseapi.ErrAmbiguousOutcome)
		if st := ha.State(); st != leaseapi.StateUncertain {
			t.Errorf("a after an ambiguous release: %v, want uncertain", st)
		}
		if _, held, err := direct.Inspect(ctx, k); err != nil || held {
			t.Fatalf("server after the cut release: held %v (%v): the release did not commit, the scenario did not happen", held, err)
		}
		hb := e.acquire(b, k)
		if hb.Token() <= ha.Token() {
			t.Errorf("b's token %d not above a's %d", hb.Token(), ha.Token())
		}
		err = eventually(e.policy.TTL()/2, func() error {
			err := ha.Release(ctx)
			if k := leaseapi.Kind(err); k == leaseapi.ErrBackendUnavailable || k == leaseapi.ErrAmbiguousOutcome {
				return err // reconnecting
			}
			e.wantKind("a: retried Release", err, leaseapi.ErrStaleOwner)
			return nil
		})
		if err != nil {
			t.Fatalf("a: retried Release never reached the server: %v", err)
		}
		if e.admit(ha) {
			t.Errorf("a Active after its retry")
		}
		rec, held, err := direct.Inspect(ctx, k)
		if err != nil || !held || rec.Token != hb.Token() || rec.Owner != hb.Owner() {
			t.Errorf("server after a's retry: held %v token %d (%v), want b's %d", held, rec.Token, err, hb.Token())
		}
		if err := hb.Validate(ctx); err != nil {
			t.Errorf("b after a's retry: %v", err)
		}
		if e.admit(hb) {
			_ = e.write(hb, "b")
		}
		pause(ctx, time.Millisecond)
		_ = hb.Release(ctx)
	})
}

// TestRealDeferredExecution is scenario 7 on real servers: the server holds
// writes back (Valkey: CLIENT PAUSE ... WRITE; PostgreSQL: another
// transaction holds the lease's row FOR UPDATE) while a holder's Renew and
// another client's TryAcquire time out, then executes them late, after
// the holder's grant has expired. The holder got ErrAmbiguousOutcome and
// stayed Uncertain, then Expired; the other client got no handle (its
// resolving read, which is not held back, saw the holder). Whatever the
// late executions did (the renewal finds the grant expired; the
// acquisition may grant an orphan to an owner id nobody holds), a third
// client's grant comes later with a higher token and nothing overlaps.
func TestRealDeferredExecution(t *testing.T) {
	forEachBackend(t, time.Second, func(e *realEnv) {
		t := e.t
		k := leaseapi.MustKey("sc7", "k")
		a, b, c := e.client("a"), e.client("b"), e.client("c")
		direct := e.openStore("").(leaseapi.Inspector)
		ctx := context.Background()
		h := e.acquire(a, k)
		// e.client warmed a's renewal and b's acquisition and inspection
		// on keys of their own (retrying what a loaded machine makes
		// fail): the held-back requests below are the scripts or
		// statements themselves, each store knows the server's clock.
		if e.admit(h) {
			_ = e.write(h, "a")
		}
		hold := 3 * e.policy.TTL()
		unblock := e.holdWrites(k, hold)
		// Each held-back request is cut off from its client once it has
		// reached the server (blackhole after the send), as in a partition:
		// the client's abort (a closed connection, PostgreSQL's cancel
		// request) cannot reach the server either.
		heldBack := func(cl *realClient, call func() error) error {
			before := cl.proxy.Stats().ToServer
			errc := make(chan error, 1)
			go func() { errc <- call() }()
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := cl.proxy.WaitFor(wctx, func(s faultproxy.Stats) bool { return s.ToServer > before }); err != nil {
				t.Errorf("%s: request never sent: %v", cl.name, err)
			}
			cl.proxy.Blackhole()
			return <-errc
		}
		deadline := h.Deadline()
		renewSent := time.Now()
		err := heldBack(a, func() error { return h.Renew(ctx) })
		e.wantKind("a: Renew while the server holds writes", err, leaseapi.ErrAmbiguousOutcome)
		if st := h.State(); st != leaseapi.StateUncertain && st != leaseapi.StateExpired {
			t.Errorf("a after the held-back renewal: %v", st)
		}
		if !h.Deadline().Equal(deadline) {
			t.Errorf("the held-back renewal moved the deadline")
		}
		var hb *runtime.Handle
		err = heldBack(b, func() error {
			var err error
			hb, err = b.c.TryAcquire(ctx, k, e.policy)
			return err
		})
		if err == nil {
			t.Errorf("b: TryAcquire while writes are held back returned a handle (token %d)", hb.Token())
		}
		t.Logf("b's held-back TryAcquire: %v", leaseapi.Kind(err))
		for !h.State().Terminal() {
			if e.admit(h) {
				t.Errorf("a Active after its renewal was held back")
			}
			pause(ctx, 5*time.Millisecond)
		}
		// Hold writes until the grant has expired on the server too (same
		// machine: the server's clock is ours), then let them through.
		pause(ctx, time.Until(h.Snapshot().ExpiresAt)+50*time.Millisecond)
		unblock()
		// Let the late executions run (poll for a late grant for a while),
		// then look at what they left.
		var rec leaseapi.Record
		var held bool
		_ = eventually(500*time.Millisecond, func() error {
			var err error
			rec, held, err = direct.Inspect(ctx, k)
			if err == nil && !held {
				return leaseapi.ErrContended // nothing yet: look again
			}
			return err
		})
		// Both requests carried a not-after bound (their operation
		// timeout; both stores had learnt the server's clock from their
		// warm-up calls), and writes were held back past it: if the server
		// ran them late, they changed nothing. (The backends' own
		// TestLateExecutionIsNoop force the late run; here the client's
		// abort may also have discarded them.)
		switch {
		case held && rec.Owner == h.Owner():
			t.Errorf("a's renewal, held back past its bound, committed: expires %v after it was sent", rec.ExpiresAt.Sub(renewSent).Round(time.Millisecond))
			if h.State() == leaseapi.StateActive {
				t.Errorf("a's handle trusted its late renewal")
			}
		case held:
			t.Errorf("b's acquisition, held back past its bound, granted an orphan: token %d (a held %d)", rec.Token, h.Token())
		default:
			t.Logf("no late execution left a live grant (last token %d)", rec.Token)
		}
		a.proxy.Pass()
		b.proxy.Pass()
		hc, err := c.c.Acquire(ctx, k, e.policy)
		if err != nil {
			t.Fatalf("c: Acquire after the late executions: %v", err)
		}
		e.granted(hc)
		if hc.Token() <= max(h.Token(), rec.Token) {
			t.Errorf("c's token %d not above %d", hc.Token(), max(h.Token(), rec.Token))
		}
		if e.admit(hc) {
			_ = e.write(hc, "c")
		}
		e.wantKind("a: stale write after the late executions", e.write(h, "a-late"), leaseapi.ErrStaleOwner)
		pause(ctx, time.Millisecond)
		_ = hc.Release(ctx)
	})
}

// holdWrites makes the server hold back writes to k for at most d and
// returns a function that ends the hold early (and waits for it to end).
func (e *realEnv) holdWrites(k leaseapi.Key, d time.Duration) (unblock func()) {
	t := e.t
	switch e.kind {
	case "valkey":
		if _, err := e.vk.Do("CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), "WRITE"); err != nil {
			t.Fatalf("CLIENT PAUSE: %v", err)
		}
		return func() {
			if _, err := e.vk.Do("CLIENT", "UNPAUSE"); err != nil {
				t.Errorf("CLIENT UNPAUSE: %v", err)
			}
		}
	default:
		ctx, cancel := context.WithTimeout(context.Background(), d)
		conn, err := pgx.Connect(ctx, e.pg.URL())
		if err != nil {
			cancel()
			t.Fatalf("connect: %v", err)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			cancel()
			t.Fatalf("begin: %v", err)
		}
		table := pgx.Identifier{e.schema, postgres.DefaultTable}.Sanitize()
		tag, err := tx.Exec(ctx, "SELECT 1 FROM "+table+" WHERE key = $1 FOR UPDATE", k.String())
		if err != nil || tag.RowsAffected() != 1 {
			cancel()
			t.Fatalf("lock the row: %v (%d rows)", err, tag.RowsAffected())
		}
		return func() {
			_ = tx.Rollback(context.Background())
			cancel()
			_ = conn.Close(context.Background())
		}
	}
}
