package valkey_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
)

// The floor's scripts (peersbench's raw-redis adapter), verbatim: the
// least server work a fenced acquire, renew and release can do.
const (
	floorAcquireSrc = `if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`
	floorReleaseSrc = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`
	floorRenewSrc = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`
)

var (
	floorAcquire = vk.NewLuaScript(floorAcquireSrc)
	floorRelease = vk.NewLuaScript(floorReleaseSrc)
	floorRenew   = vk.NewLuaScript(floorRenewSrc)
)

// evalCost runs fn between CONFIG RESETSTAT and INFO commandstats, and
// returns the number of EVALSHA and FCALL calls (the floor's scripts run
// by EVALSHA, the Store's by FCALL) and their cost: with cg nil, their
// total server time in µs (a script's time includes the commands it
// calls); with cg, the server's instructions while fn ran (callgrind).
func evalCost(t *testing.T, c vk.Client, cg *callgrind, fn func()) (int64, float64) {
	t.Helper()
	ctx := context.Background()
	if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if cg != nil {
		cg.zero(t)
	}
	fn()
	var ir float64
	if cg != nil {
		ir = cg.instructions(t)
	}
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	calls := int64(commandStat(info, "evalsha", "calls") + commandStat(info, "fcall", "calls"))
	usec := commandStat(info, "evalsha", "usec") + commandStat(info, "fcall", "usec")
	if calls == 0 {
		t.Fatal("no cmdstat_evalsha or cmdstat_fcall in INFO commandstats")
	}
	if cg != nil {
		return calls, ir
	}
	return calls, usec
}

// callgrind counts the instructions of a server run under valgrind's
// callgrind tool, through callgrind_control.
type callgrind struct{ pid string }

// underCallgrind makes the servers the test starts from now on run under
// callgrind: a valkey-server on PATH that runs the real binary under
// valgrind (testserver prefers that name; valgrind keeps the pid, so
// testserver's check that the server is its own child still holds).
func underCallgrind(t *testing.T) {
	t.Helper()
	bin, err := testserver.FindBinary([]string{"valkey-server", "redis-server"})
	if err != nil {
		t.Skip("no server binary")
	}
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH", tool)
		}
	}
	dir := t.TempDir()
	script := "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file=/dev/null " + bin + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "valkey-server"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// serverCallgrind returns the callgrind of srv, a server started after
// underCallgrind.
func serverCallgrind(t *testing.T, srv *testserver.RedisServer) *callgrind {
	t.Helper()
	info, err := srv.Do("INFO", "server")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if pid, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return &callgrind{pid: pid}
		}
	}
	t.Fatal("no process_id in INFO server")
	return nil
}

func (cg *callgrind) control(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("callgrind_control", append(args, cg.pid)...).CombinedOutput()
	if err != nil {
		t.Fatalf("callgrind_control %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (cg *callgrind) zero(t *testing.T) { cg.control(t, "-z") }

// instructions returns the instructions executed since the last zero, all
// threads.
func (cg *callgrind) instructions(t *testing.T) float64 {
	out := cg.control(t, "-e", "Ir")
	var sum float64
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "Th" {
			n, err := strconv.ParseFloat(strings.ReplaceAll(f[2], ",", ""), 64)
			if err != nil {
				t.Fatalf("callgrind_control: %q", line)
			}
			sum += n
		}
	}
	return sum
}

// TestScriptCost prints, for each operation, the server CPU per call of
// the Store's script next to the floor's (INFO commandstats, one private
// server, one run). It is a measurement, not a check: it runs only with
// LEASE_SCRIPT_COST=N (N calls per row, e.g. 20000), as in
//
//	LEASE_SCRIPT_COST=20000 go test -run TestScriptCost -v ./backend/valkey
//
// The server shares the machine's cores with everything else, so each row
// is measured in rounds of 500 calls, the floor's and the Store's rounds
// of one operation alternating, and the table reports the median round:
// noise from other processes then falls on both sides alike. Keys of both
// have about the same length (a Store with the prefix "f").
//
// With LEASE_SCRIPT_COST_CALLGRIND=1 as well, the server runs under
// valgrind's callgrind and the table counts its instructions per call
// (thousands), event loop and reply included: deterministic, unlike the
// time, so a change of a few percent shows. (valgrind slows the server
// about fifty-fold: N=5120 takes a few minutes.)
func TestScriptCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LEASE_SCRIPT_COST"))
	if n <= 0 {
		t.Skip("set LEASE_SCRIPT_COST=N to measure the scripts' server CPU")
	}
	const m = 512 // calls per round (two batches of 256)
	rounds := max(n/m, 1)
	unit := "server CPU per call (µs), INFO commandstats"
	useCG := os.Getenv("LEASE_SCRIPT_COST_CALLGRIND") == "1"
	if useCG {
		underCallgrind(t)
		unit = "server instructions per call (k), callgrind"
	}
	srv := privateServer(t, testserver.RedisOptions{})
	var cg *callgrind
	if useCG {
		cg = serverCallgrind(t, srv)
	}
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{Prefix: "f"})
	watcher := newStore(t, c, valkey.Options{Prefix: "f"})
	// A deadline, as the runtime gives every call: the acquire and renew
	// scripts then get a not-after bound to check, as they do in use.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	const ttl = time.Minute
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	samples := map[string][]float64{} // op/who -> per-round µs per call
	var order []string
	measure := func(name string, per int, fn func()) {
		calls, usec := evalCost(t, c, cg, fn)
		if cg != nil {
			usec /= 1000 // thousands of instructions
		}
		if calls == 0 {
			t.Fatalf("%s: no EVALSHA or FCALL calls", name)
		}
		if _, ok := samples[name]; !ok {
			order = append(order, name)
		}
		samples[name] = append(samples[name], usec/float64(calls)/float64(per))
	}

	// The floor's keys: "f{cN}" and "f{cN}:fence", as long as the Store's
	// "f:{c/N}:lease" give or take a few bytes.
	floorKey := func(i int) (string, string) { k := "f{c" + strconv.Itoa(i) + "}"; return k, k + ":fence" }
	const owner = "owner-a-0123456789abcdef"
	lk, tk := floorKey(-1)
	must(floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms}).Error())
	must(floorRenew.Exec(ctx, c, []string{lk}, []string{owner + ":1", ms}).Error())
	must(floorRelease.Exec(ctx, c, []string{lk}, []string{owner + ":1"}).Error())
	wk := leaseapi.MustKey("c", "warm")
	wr, err := s.TryAcquire(ctx, wk, ownerA, ttl)
	must(err)
	_, err = s.Renew(ctx, wr, ttl)
	must(err)
	_, err = s.Validate(ctx, wr)
	must(err)
	_, _, err = s.Inspect(ctx, wk)
	must(err)
	wck, _ := s.CacheKey(wk, "c")
	must(s.Guard(ctx, wr, wck, "v", 0))
	must(s.RenewBatch(ctx, []leaseapi.RenewRequest{{Record: wr, TTL: ttl}})[0].Err)
	must(s.Release(ctx, wr))

	const batch = 256
	batchRow := fmt.Sprintf("renew, batch of %d (per lease)", batch)
	for r := range rounds {
		base := r * m
		keys := make([]leaseapi.Key, m)
		for i := range keys {
			keys[i] = leaseapi.MustKey("c", strconv.Itoa(base+i))
		}
		vals := make([]string, m)
		recs := make([]leaseapi.Record, m)
		measure("acquire/floor", 1, func() {
			for i := range m {
				lk, tk := floorKey(base + i)
				tok, err := floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms}).AsInt64()
				must(err)
				vals[i] = owner + ":" + strconv.FormatInt(tok, 10)
			}
		})
		measure("acquire/store", 1, func() {
			for i, k := range keys {
				recs[i], err = s.TryAcquire(ctx, k, ownerA, ttl)
				must(err)
			}
		})
		measure("acquire, contended/floor", 1, func() {
			for i := range m {
				lk, tk := floorKey(base + i)
				must(floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms}).Error())
			}
		})
		measure("acquire, contended/store", 1, func() {
			for _, k := range keys {
				if _, err := s.TryAcquire(ctx, k, ownerB, ttl); leaseapi.Kind(err) != leaseapi.ErrContended {
					t.Fatalf("contended TryAcquire: %v", err)
				}
			}
		})
		measure("renew/floor", 1, func() {
			for i := range m {
				lk, _ := floorKey(base + i)
				must(floorRenew.Exec(ctx, c, []string{lk}, []string{vals[i], ms}).Error())
			}
		})
		measure("renew/store", 1, func() {
			for i := range recs {
				recs[i], err = s.Renew(ctx, recs[i], ttl)
				must(err)
			}
		})
		measure("validate/store", 1, func() {
			for i := range recs {
				_, err := s.Validate(ctx, recs[i])
				must(err)
			}
		})
		measure("inspect/store", 1, func() {
			for _, k := range keys {
				_, _, err := s.Inspect(ctx, k)
				must(err)
			}
		})
		measure("guard/store", 1, func() {
			for i := range recs {
				ck, _ := s.CacheKey(recs[i].Key, "c")
				must(s.Guard(ctx, recs[i], ck, "value", 0))
			}
		})
		measure(batchRow+"/store", batch, func() {
			for start := 0; start+batch <= m; start += batch {
				reqs := make([]leaseapi.RenewRequest, batch)
				for j := range reqs {
					reqs[j] = leaseapi.RenewRequest{Record: recs[start+j], TTL: ttl}
				}
				for j, r := range s.RenewBatch(ctx, reqs) {
					must(r.Err)
					recs[start+j] = r.Record
				}
			}
		})
		// Half the leases get a watching contender, whose attempt marks
		// the grant so that its release publishes.
		stops := make([]func(), m/2)
		for i := range stops {
			_, stops[i] = watcher.WatchRelease(keys[i])
		}
		measure("acquire, contended, watching (marks)/store", 1, func() {
			for _, k := range keys[:m/2] {
				if _, err := watcher.TryAcquire(ctx, k, ownerB, ttl); leaseapi.Kind(err) != leaseapi.ErrContended {
					t.Fatalf("contended TryAcquire: %v", err)
				}
			}
		})
		for _, stop := range stops {
			stop()
		}
		measure("release, marked (publishes)/store", 1, func() {
			for i := range recs[:m/2] {
				must(s.Release(ctx, recs[i]))
			}
		})
		recs = recs[m/2:]
		measure("release/floor", 1, func() {
			for i := m / 2; i < m; i++ {
				lk, _ := floorKey(base + i)
				must(floorRelease.Exec(ctx, c, []string{lk}, []string{vals[i]}).Error())
			}
		})
		measure("release/store", 1, func() {
			for i := range recs {
				must(s.Release(ctx, recs[i]))
			}
		})
	}

	median := func(xs []float64) float64 {
		xs = append([]float64(nil), xs...)
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, the floor by EVALSHA, the store by FCALL; median of %d rounds of %d calls\n", unit, rounds, m)
	fmt.Fprintf(&b, "%-34s %8s %8s %7s\n", "operation", "floor", "store", "ratio")
	for _, name := range order {
		op, who, _ := strings.Cut(name, "/")
		if who != "store" {
			continue
		}
		st := median(samples[name])
		if f, ok := samples[op+"/floor"]; ok {
			fl := median(f)
			fmt.Fprintf(&b, "%-34s %8.2f %8.2f %6.2fx\n", op, fl, st, st/fl)
		} else {
			fmt.Fprintf(&b, "%-34s %8s %8.2f\n", op, "-", st)
		}
	}
	t.Log("\n" + b.String())
}
