package valkey_test

import (
	"context"
	"fmt"
	"os"
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
var (
	floorAcquire = vk.NewLuaScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. t, 'PX', ARGV[2])
return t`)
	floorRelease = vk.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
	floorRenew = vk.NewLuaScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0`)
)

// scriptCost is the server's CPU per call of one phase.
type scriptCost struct {
	op, who string
	calls   int64
	usec    float64 // per call (per lease for the batch)
}

// evalCost runs fn, which makes calls EVALSHA calls, between CONFIG
// RESETSTAT and INFO commandstats, and returns the server's usec_per_call
// of EVALSHA (a script's time includes the commands it calls) divided by
// per (the leases per call).
func evalCost(t *testing.T, c vk.Client, per int, fn func()) (int64, float64) {
	t.Helper()
	ctx := context.Background()
	if err := c.Do(ctx, c.B().ConfigResetstat().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	fn()
	info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		var calls int64
		var usec float64
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				usec, _ = strconv.ParseFloat(v, 64)
			}
		}
		return calls, usec / float64(per)
	}
	t.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0, 0
}

// TestScriptCost prints, for each operation, the server CPU per call of
// the Store's script next to the floor's (INFO commandstats, one private
// server, one run). It is a measurement, not a check: it runs only with
// LEASE_SCRIPT_COST=N (N calls per phase, e.g. 20000), alone on an idle
// machine, as in
//
//	LEASE_SCRIPT_COST=20000 go test -run TestScriptCost -v ./backend/valkey
func TestScriptCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LEASE_SCRIPT_COST"))
	if n <= 0 {
		t.Skip("set LEASE_SCRIPT_COST=N to measure the scripts' server CPU")
	}
	srv := privateServer(t, testserver.RedisOptions{})
	c := newClient(t, srv.Addr())
	s := newStore(t, c, valkey.Options{})
	ctx := context.Background()
	const ttl = time.Minute
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	keys := make([]leaseapi.Key, n)
	for i := range keys {
		keys[i] = leaseapi.MustKey("cost", "k"+strconv.Itoa(i))
	}
	var rows []scriptCost
	row := func(op, who string, per int, fn func()) {
		calls, usec := evalCost(t, c, per, fn)
		rows = append(rows, scriptCost{op, who, calls, usec})
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}

	// The floor, on keys of its own, warmed up so that EVALSHA never
	// misses.
	floorKey := func(i int) (string, string) {
		return "floor:{k" + strconv.Itoa(i) + "}", "floor:{k" + strconv.Itoa(i) + "}:fence"
	}
	const owner = "0123456789abcdef"
	warm := func() {
		lk, tk := floorKey(-1)
		floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms})
		floorRenew.Exec(ctx, c, []string{lk}, []string{owner + ":1", ms})
		floorRelease.Exec(ctx, c, []string{lk}, []string{owner + ":1"})
	}
	warm()
	vals := make([]string, n)
	row("acquire", "floor", 1, func() {
		for i := range n {
			lk, tk := floorKey(i)
			tok, err := floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms}).AsInt64()
			must(err)
			vals[i] = owner + ":" + strconv.FormatInt(tok, 10)
		}
	})
	row("acquire, contended", "floor", 1, func() {
		for i := range n {
			lk, tk := floorKey(i)
			must(floorAcquire.Exec(ctx, c, []string{lk, tk}, []string{owner, ms}).Error())
		}
	})
	row("renew", "floor", 1, func() {
		for i := range n {
			lk, _ := floorKey(i)
			must(floorRenew.Exec(ctx, c, []string{lk}, []string{vals[i], ms}).Error())
		}
	})
	row("release", "floor", 1, func() {
		for i := range n {
			lk, _ := floorKey(i)
			must(floorRelease.Exec(ctx, c, []string{lk}, []string{vals[i]}).Error())
		}
	})

	// The Store, through its methods (the arguments it really sends).
	wk := leaseapi.MustKey("cost", "warm")
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
	recs := make([]leaseapi.Record, n)
	row("acquire", "store", 1, func() {
		for i, k := range keys {
			recs[i], err = s.TryAcquire(ctx, k, ownerA, ttl)
			must(err)
		}
	})
	row("acquire, contended", "store", 1, func() {
		for _, k := range keys {
			if _, err := s.TryAcquire(ctx, k, ownerB, ttl); leaseapi.Kind(err) != leaseapi.ErrContended {
				t.Fatalf("contended TryAcquire: %v", err)
			}
		}
	})
	row("renew", "store", 1, func() {
		for i := range recs {
			recs[i], err = s.Renew(ctx, recs[i], ttl)
			must(err)
		}
	})
	row("validate", "store", 1, func() {
		for i := range recs {
			_, err := s.Validate(ctx, recs[i])
			must(err)
		}
	})
	row("inspect", "store", 1, func() {
		for _, k := range keys {
			_, _, err := s.Inspect(ctx, k)
			must(err)
		}
	})
	row("guard", "store", 1, func() {
		for i := range recs {
			ck, _ := s.CacheKey(recs[i].Key, "c")
			must(s.Guard(ctx, recs[i], ck, "value", 0))
		}
	})
	const batch = 256
	row(fmt.Sprintf("renew, batch of %d (per lease)", batch), "store", batch, func() {
		for start := 0; start+batch <= n; start += batch {
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
	row("release", "store", 1, func() {
		for i := range recs {
			must(s.Release(ctx, recs[i]))
		}
	})

	floor := map[string]float64{}
	for _, r := range rows {
		if r.who == "floor" {
			floor[r.op] = r.usec
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server CPU per call, INFO commandstats usec_per_call of EVALSHA, %d calls per row\n", n)
	fmt.Fprintf(&b, "%-34s %8s %8s %7s\n", "operation", "floor", "store", "ratio")
	for _, r := range rows {
		if r.who == "floor" {
			continue
		}
		if f, ok := floor[r.op]; ok {
			fmt.Fprintf(&b, "%-34s %8.2f %8.2f %6.2fx\n", r.op, f, r.usec, r.usec/f)
		} else {
			fmt.Fprintf(&b, "%-34s %8s %8.2f\n", r.op, "-", r.usec)
		}
	}
	t.Log("\n" + b.String())
}
