package valkey_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// storeOps are every kind of call a Store makes, each a step that must
// succeed: acquire (plain and watching), renew, batched renewal,
// validate, inspect, guard, release and the release of a grant that
// already ended (the counter's script). The watching acquisition's entry
// in the wait set is then removed (through admin, by ZREM), so that the
// release gives s no turn to pass on (srcPassTurn): the pass is
// asynchronous, and would make the count of calls racy
// (TestWithdrawnStoresPassTheTurn covers it).
func storeOps(s *valkey.Store, admin vk.Client, k leaseapi.Key) []struct {
	name string
	run  func(ctx context.Context) error
} {
	var rec leaseapi.Record
	return []struct {
		name string
		run  func(ctx context.Context) error
	}{
		{"acquire", func(ctx context.Context) (err error) {
			rec, err = s.TryAcquire(ctx, k, ownerA, time.Minute)
			return err
		}},
		{"acquire, watching", func(ctx context.Context) error {
			_, stop := s.WatchRelease(k)
			defer stop()
			if _, err := s.TryAcquire(ctx, k, ownerB, time.Minute); leaseapi.Kind(err) != leaseapi.ErrContended {
				return err
			}
			lease, _ := s.Keys(k)
			return admin.Do(ctx, admin.B().Zrem().Key(strings.TrimSuffix(lease, "lease")+"wait").Member(valkey.StoreID(s)).Build()).Error()
		}},
		{"renew", func(ctx context.Context) (err error) {
			rec, err = s.Renew(ctx, rec, time.Minute)
			return err
		}},
		{"renew batch", func(ctx context.Context) error {
			r := s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: rec, TTL: time.Minute}})[0]
			rec = r.Record
			return r.Err
		}},
		{"validate", func(ctx context.Context) error { _, err := s.Validate(ctx, rec); return err }},
		{"inspect", func(ctx context.Context) error { _, _, err := s.Inspect(ctx, k); return err }},
		{"guard", func(ctx context.Context) error {
			ck, err := s.CacheKey(k, "c")
			if err != nil {
				return err
			}
			return s.Guard(ctx, rec, ck, "v", 0)
		}},
		{"release", func(ctx context.Context) error { return s.Release(ctx, rec) }},
		{"release, ended", func(ctx context.Context) error { return s.Release(ctx, rec) }},
	}
}

// commandCalls returns INFO commandstats' calls and rejected_calls of
// command cmd (e.g. "fcall", "function|load") since the last CONFIG
// RESETSTAT.
func commandCalls(t *testing.T, c vk.Client, cmd string) (calls, rejected int64) {
	t.Helper()
	info, err := c.Do(t.Context(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	return int64(commandStat(info, cmd, "calls")), int64(commandStat(info, cmd, "rejected_calls"))
}

// commandStat returns one field ("calls", "usec", "failed_calls"...) of
// command cmd's line in the text of INFO commandstats; 0 if it has none.
func commandStat(info, cmd, field string) float64 {
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(f, "="); k == field {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
	}
	return 0
}

func resetStats(t *testing.T, c vk.Client) {
	t.Helper()
	if err := c.Do(t.Context(), c.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// libraryLoaded reports whether the server has the Store's library.
func libraryLoaded(t *testing.T, c vk.Client) bool {
	t.Helper()
	libs, err := c.Do(t.Context(), c.B().FunctionList().Libraryname(valkey.LibraryID).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	return len(libs) == 1
}

// TestOperationsRunAsFunctions shows that every operation runs by FCALL
// once the library is loaded (no EVALSHA or EVAL at all), and that each
// one still succeeds, and loads the library again, after the server lost
// its functions (FUNCTION FLUSH: as a restart without persistence or a
// new Cluster node would) right before it.
func TestOperationsRunAsFunctions(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	k := leaseapi.MustKey("fn", "k")

	ops := storeOps(s, c, k)
	for _, op := range ops {
		if err := op.run(ctx); err != nil {
			t.Fatalf("%s (loading the library): %v", op.name, err)
		}
	}
	if !libraryLoaded(t, c) {
		t.Fatal("the library was not loaded")
	}
	resetStats(t, c)
	for _, op := range ops {
		if err := op.run(ctx); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
	}
	fcalls, _ := commandCalls(t, c, "fcall")
	evalshas, _ := commandCalls(t, c, "evalsha")
	evals, _ := commandCalls(t, c, "eval")
	// One call per operation, two for the release of an ended grant.
	if want := int64(len(ops) + 1); fcalls != want || evalshas != 0 || evals != 0 {
		t.Fatalf("with the library loaded: %d FCALL, %d EVALSHA, %d EVAL; want %d, 0, 0", fcalls, evalshas, evals, want)
	}

	for _, op := range ops {
		if err := c.Do(ctx, c.B().FunctionFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := op.run(ctx); err != nil {
			t.Fatalf("%s after FUNCTION FLUSH: %v", op.name, err)
		}
		if !libraryLoaded(t, c) {
			t.Fatalf("%s after FUNCTION FLUSH did not load the library again", op.name)
		}
	}
}

// TestFunctionsRefused shows a Store whose ACL user may not run FCALL or
// load functions: every operation succeeds by EVALSHA, and after the
// first refusal the Store stops trying FCALL (for a minute: one refused
// FCALL and one refused FUNCTION LOAD, not one per operation).
func TestFunctionsRefused(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	admin := newClient(t, srv.Addr())
	prefix := uniquePrefix()
	user := "u-" + uniquePrefix()
	rules := storeRules(prefix)
	rules = rules[:len(rules)-len(functionRules)]
	aclUser(t, admin, user, "secret-pw", rules...)
	c := newClientOpt(t, vk.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "secret-pw"})
	s := newStore(t, c, valkey.Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	resetStats(t, admin)
	ops := storeOps(s, admin, leaseapi.MustKey("fn", "k"))
	for range 2 {
		for _, op := range ops {
			if err := op.run(ctx); err != nil {
				t.Fatalf("%s without functions: %v", op.name, err)
			}
		}
	}
	_, fcalls := commandCalls(t, admin, "fcall")
	_, loads := commandCalls(t, admin, "function|load")
	if fcalls != 1 || loads != 1 {
		t.Fatalf("refused: %d FCALL, %d FUNCTION LOAD; want 1 and 1", fcalls, loads)
	}
	if libraryLoaded(t, admin) {
		t.Fatal("the library was loaded by a user who may not")
	}
}
