package safety_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

// Environment switches of the simulation tier.
const (
	envSeed      = "LEASE_SAFETY_SEED"  // replay one seed in every scenario
	envSeeds     = "LEASE_SAFETY_SEEDS" // seeds per scenario (mutation runs)
	envLong      = "LEASE_SAFETY_LONG"  // 1: the long tier, 10^5 seeds in all
	envArtifacts = "LEASE_TEST_ARTIFACTS"
)

// longFactor scales the default seed counts (about 2,000 in all) to the
// long tier's 10^5.
const longFactor = 50

// seedList returns the seeds a scenario runs: LEASE_SAFETY_SEED alone if
// set, else LEASE_SAFETY_SEEDS of them, else def (a tenth under -short,
// fifty times as many with LEASE_SAFETY_LONG=1).
func seedList(t *testing.T, def int) []uint64 {
	t.Helper()
	if s := os.Getenv(envSeed); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envSeed, s, err)
		}
		return []uint64{n}
	}
	n := def
	switch {
	case os.Getenv(envSeeds) != "":
		v, err := strconv.Atoi(os.Getenv(envSeeds))
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want a positive count", envSeeds, os.Getenv(envSeeds))
		}
		n = v
	case os.Getenv(envLong) == "1":
		n = def * longFactor
	case testing.Short():
		n = max(def/10, 3)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i)
	}
	return out
}

// runSeeds runs scenario once per seed, each in its own parallel subtest
// inside a synctest bubble, with a fresh world.
func runSeeds(t *testing.T, def int, scenario func(w *world)) {
	t.Helper()
	name := t.Name()
	for _, seed := range seedList(t, def) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			simtest.Simulate(t, func(t *testing.T) {
				w := newWorld(t, name, seed)
				defer w.close()
				scenario(w)
				w.close()
				w.finish()
			})
		})
	}
}

// world is one seeded scenario run: a memory backend (optionally with a
// skewed clock), a ledger on both sides of every client's fault layer, a
// history, fenced resources and the clients.
type world struct {
	t        *testing.T
	scenario string
	seed     uint64

	rngMu sync.Mutex
	rng   *rand.Rand

	store  *memory.Store
	server leaseapi.Backend // the ledger's server side of store
	ledger *simtest.Ledger
	hist   *simtest.History
	policy leaseapi.Policy

	mu        sync.Mutex
	problems  []string
	notes     []string
	clients   []*simClient
	resources map[leaseapi.Key]*simtest.Resource
	// expectViolations: the scenario runs outside the model and must make
	// the history checker find something (scenario 10, fast clock).
	expectViolations bool
	// allowed are history rules the scenario breaks on purpose (a backend
	// that lost acknowledged writes: scenario 8).
	allowed map[string]bool
}

// simClient is one client of the world: a runtime Client over
// ledger → Deferred → Faulty → ledger → store.
type simClient struct {
	name     string
	faulty   *simtest.Faulty
	deferred *simtest.Deferred
	backend  leaseapi.Backend // what the runtime client calls
	c        *runtime.Client
	rand     *seeded // this client's own random source
}

// basePolicy is the simulation policy: TTL 4s, margin 400ms, renew every
// 1s, retry 200ms + up to 100ms, wait 30s, operation timeout 500ms.
func basePolicy() leaseapi.PolicyOptions {
	return leaseapi.PolicyOptions{
		TTL: 4 * time.Second, SafetyMargin: 400 * time.Millisecond, RenewEvery: time.Second,
		Retry: 200 * time.Millisecond, Jitter: 100 * time.Millisecond, Wait: 30 * time.Second,
		OperationTimeout: 500 * time.Millisecond,
	}
}

func newWorld(t *testing.T, scenario string, seed uint64) *world {
	w := &world{
		t: t, scenario: scenario, seed: seed,
		rng:       rand.New(rand.NewPCG(seed, 0x5afe7e)),
		ledger:    simtest.NewLedger(),
		hist:      simtest.NewHistory(),
		resources: map[leaseapi.Key]*simtest.Resource{},
	}
	w.setStore(memory.Options{})
	p, err := leaseapi.NewPolicy(basePolicy())
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	w.policy = p
	return w
}

// setStore replaces the backend (before any client is made).
func (w *world) setStore(o memory.Options) {
	s, err := memory.New(o)
	if err != nil {
		w.t.Fatalf("memory.New: %v", err)
	}
	w.store = s
	w.server = w.ledger.Server(s)
}

func (w *world) intn(n int) int {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.IntN(n)
}

// between returns a uniformly random duration in [lo, hi).
func (w *world) between(lo, hi time.Duration) time.Duration {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)))
}

func (w *world) float() float64 {
	w.rngMu.Lock()
	defer w.rngMu.Unlock()
	return w.rng.Float64()
}

// seeded is one client's random source (jitter, the client's workload)
// and owner source. Each client draws from its own generator, derived from
// the seed and the client's name, so that a replay does not depend on the
// order in which goroutines reach a shared generator.
type seeded struct {
	name string
	mu   sync.Mutex
	rng  *rand.Rand
	n    int
}

func newSeeded(seed uint64, name string) *seeded {
	var h uint64 = 14695981039346656037 // FNV-1a of the name
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return &seeded{name: name, rng: rand.New(rand.NewPCG(seed, h))}
}

func (s *seeded) intn(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.IntN(n)
}

func (s *seeded) between(lo, hi time.Duration) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
}

func (s *seeded) Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return s.between(0, d)
}

func (s *seeded) NewOwner() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("%s-%d", s.name, s.n), nil
}

// client makes a client named name.
func (w *world) client(name string) *simClient {
	f := simtest.NewFaulty(w.server)
	d := simtest.NewDeferred(f)
	b := w.ledger.Client(name, d)
	src := newSeeded(w.seed, name)
	c, err := runtime.NewClient(b, runtime.ClientOptions{Owners: src, Retry: src})
	if err != nil {
		w.t.Fatalf("NewClient: %v", err)
	}
	sc := &simClient{name: name, faulty: f, deferred: d, backend: b, c: c, rand: src}
	w.mu.Lock()
	w.clients = append(w.clients, sc)
	w.mu.Unlock()
	return sc
}

// resource returns the fenced resource protected by k.
func (w *world) resource(k leaseapi.Key) *simtest.Resource {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.resources[k]
	if r == nil {
		r = simtest.NewResource(k.String(), w.hist)
		w.resources[k] = r
	}
	return r
}

// problem records a scenario assertion failure; the run fails at finish,
// after the artifacts are written.
func (w *world) problem(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.problems = append(w.problems, fmt.Sprintf(format, args...))
}

// note records a line of extra state for the artifacts.
func (w *world) note(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notes = append(w.notes, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// fatal stops the scenario now (from the test goroutine only), after
// writing the artifacts.
func (w *world) fatal(format string, args ...any) {
	w.t.Helper()
	w.problem(format, args...)
	w.close()
	w.finish()
	w.t.FailNow()
}

// holdManaged makes the named client acquire k at once and start managed
// renewal; either failing ends the scenario.
func (w *world) holdManaged(name string, k leaseapi.Key) *runtime.Handle {
	c := w.client(name)
	h, err := c.c.TryAcquire(context.Background(), k, w.policy)
	if err != nil {
		w.fatal("%s: TryAcquire: %v", name, err)
	}
	w.granted(h)
	if _, err := h.StartManaged(context.Background()); err != nil {
		w.fatal("%s: StartManaged: %v", name, err)
	}
	return h
}

// contend starts one goroutine per name: its client waits for k, holds it
// under managed renewal and writes (while admitted) every 20ms until the
// handle ends or, with limit > 0, limit has passed; then it releases. The
// returned WaitGroup waits for all of them.
func (w *world) contend(k leaseapi.Key, names []string, limit time.Duration) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, name := range names {
		c := w.client(name)
		wg.Go(func() {
			h, err := c.c.Acquire(context.Background(), k, w.policy)
			if err != nil {
				return
			}
			w.granted(h)
			if _, err := h.StartManaged(context.Background()); err != nil {
				w.problem("%s: StartManaged: %v", c.name, err)
			}
			end := time.Now().Add(limit)
			for !h.State().Terminal() && (limit <= 0 || time.Now().Before(end)) {
				if w.admit(h) {
					_ = w.write(h, c.name)
				}
				pause(context.Background(), 20*time.Millisecond)
			}
			if !h.State().Terminal() {
				w.release(h)
			}
		})
	}
	return &wg
}

// granted records a handle's grant in the history and checks at once that
// its deadline is within the trust bound.
func (w *world) granted(h *runtime.Handle) {
	w.hist.Grant(h.Key(), h.Owner(), h.Token(), time.Now())
	w.checkDeadline(h)
}

// checkDeadline: the handle's deadline is never later than the send of
// its granting or last confirmed renewal + TTL - margin (DESIGN §1).
func (w *world) checkDeadline(h *runtime.Handle) {
	bound, ok := w.ledger.TrustBound(h.Owner(), h.Token(), w.policy)
	if !ok {
		w.problem("%s token %d: handle without a committed grant", h.Owner(), h.Token())
		return
	}
	if d := h.Deadline(); d.After(bound) {
		w.problem("%s token %d: deadline %v past the trust bound (send + TTL - margin)", h.Owner(), h.Token(), d.Sub(bound))
	}
}

// admit is a holder's admission check before protected work: if h is
// Active now, it records the admission, checks the trust bound and
// reports true.
func (w *world) admit(h *runtime.Handle) bool {
	if h.State() != leaseapi.StateActive {
		return false
	}
	now := time.Now()
	w.hist.Admit(h.Key(), h.Owner(), h.Token(), now)
	bound, ok := w.ledger.TrustBound(h.Owner(), h.Token(), w.policy)
	if !ok || !now.Before(bound) {
		w.problem("%s token %d: Active at %v, trust bound %v (ok %v)", h.Owner(), h.Token(), now, bound, ok)
	}
	return true
}

// write is a protected write with h's token on k's resource.
func (w *world) write(h *runtime.Handle, value string) error {
	return w.resource(h.Key()).Write(h.Owner(), h.Token(), value, time.Now())
}

// pause waits d of simulated time on a worker goroutine, or until ctx
// ends. (The test goroutine uses simtest.Advance instead.)
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// close closes every client (releasing what they hold) and waits for
// deferred executions, so that the bubble ends with no goroutine left.
func (w *world) close() {
	w.mu.Lock()
	clients := append([]*simClient(nil), w.clients...)
	w.mu.Unlock()
	for _, c := range clients {
		c.faulty.SetMode(simtest.Pass)
		_ = c.c.Close(context.Background())
	}
	for _, c := range clients {
		_ = c.deferred.Drain(context.Background())
	}
}

// finish runs the checkers: the history (grant order, overlap, ungranted,
// stale writes: C1-C3), every grant committed (C2), every ambiguous
// operation matched (C4) and the scenario's own assertions. Any failure
// writes the artifacts and fails the test with the seed.
func (w *world) finish() {
	w.t.Helper()
	for _, c := range w.clients {
		_ = c.deferred.Drain(context.Background())
	}
	var out []string
	hv := w.hist.Check()
	if w.expectViolations {
		if len(hv) == 0 {
			out = append(out, "outside the model, the history checker found nothing: it cannot fail")
		} else {
			w.note("expected violations outside the model: %d, first %v", len(hv), hv[0])
		}
	} else {
		for _, v := range hv {
			if w.allowed[v.Rule] {
				continue
			}
			out = append(out, "history: "+v.String())
		}
	}
	for _, v := range w.ledger.CheckGrants(w.hist) {
		out = append(out, "grants: "+v.String())
	}
	_, _, av := w.ledger.CheckAmbiguity()
	for _, v := range av {
		out = append(out, "C4: "+v.String())
	}
	w.mu.Lock()
	out = append(out, w.problems...)
	w.problems = nil
	w.mu.Unlock()
	if len(out) == 0 {
		return
	}
	dir := w.artifacts()
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... and %d more", len(out)-10))
	}
	w.t.Fatalf("%s seed %d: %d problems (replay: %s=%d go test -run '^%s$' ./safety; artifacts in %s):\n  %s",
		w.scenario, w.seed, len(out), envSeed, w.seed, strings.SplitN(w.scenario, "/", 2)[0], dir, strings.Join(out, "\n  "))
}

// artifacts writes the history, the ledger and the notes, and returns
// their directory.
func (w *world) artifacts() string {
	dir := os.Getenv(envArtifacts)
	if dir == "" {
		dir = w.t.TempDir()
	}
	base := strings.NewReplacer("/", "_", " ", "_").Replace(w.scenario) + fmt.Sprintf("-seed-%d", w.seed)
	write := func(suffix string, fn func(*os.File) error) {
		f, err := os.Create(filepath.Join(dir, base+suffix))
		if err != nil {
			w.t.Logf("artifact %s: %v", suffix, err)
			return
		}
		defer f.Close()
		if err := fn(f); err != nil {
			w.t.Logf("artifact %s: %v", suffix, err)
		}
	}
	write("-history.json", func(f *os.File) error { return w.hist.WriteJSON(f) })
	write("-ledger.json", func(f *os.File) error { return w.ledger.WriteJSON(f) })
	w.mu.Lock()
	notes := strings.Join(w.notes, "\n") + "\n"
	w.mu.Unlock()
	write("-notes.txt", func(f *os.File) error { _, err := f.WriteString(notes); return err })
	return dir
}

// wantKind records a problem unless err matches exactly the sentinel want
// (nil for success).
func (w *world) wantKind(what string, err, want error) bool {
	if got := leaseapi.Kind(err); got != want {
		w.problem("%s: got %v, want %v", what, err, want)
		return false
	}
	return true
}

// waitFor advances simulated time in steps of step until cond holds or
// limit has passed; it reports whether cond held. Test goroutine only.
func waitFor(limit, step time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); ; {
		if cond() {
			return true
		}
		if !time.Now().Before(end) {
			return false
		}
		simtest.Advance(step)
	}
}

// release releases h a millisecond from now. The history checker orders
// events by time only, so a holder's last admission and its successor's
// grant must not share a simulated instant (any goroutine may call it).
func (w *world) release(h *runtime.Handle) {
	pause(context.Background(), time.Millisecond)
	_ = h.Release(context.Background())
}
