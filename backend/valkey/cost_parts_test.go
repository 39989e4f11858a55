package valkey_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/testserver"
)

// costPart is one row of TestScriptCostParts: a script run on keys of its
// own, through EVALSHA or, with fcall, as a function of a library (FCALL).
type costPart struct {
	op, name string
	src      string
	fcall    bool
	value    string   // if set, the lease key holds it before each call
	token    bool     // the call also names the token key (acquire)
	args     []string // the call's arguments
}

// asFunction turns a script's source into a function library with the
// one function fn: the same body, KEYS and ARGV as the function's
// parameters.
func asFunction(lib, fn, src string) string {
	if strings.HasPrefix(src, "#!") {
		_, src, _ = strings.Cut(src, "\n")
	}
	return "#!lua name=" + lib + "\nredis.register_function('" + fn + "', function(KEYS, ARGV)\n" + src + "\nend)\n"
}

// TestScriptCostParts splits the gap between the Store's scripts and the
// floor's into its parts, in server instructions per call (callgrind,
// which alone resolves differences of 1k of 30k; the rows of one
// operation are run interleaved, the median of the rounds reported). It
// is a measurement, not a check, and runs only with
// LEASE_SCRIPT_COST_PARTS=N (N calls per row), as in
//
//	LEASE_SCRIPT_COST_PARTS=3000 go test -run TestScriptCostParts -v ./backend/valkey
//
// The rows: the floor's script; the floor's with two unused arguments
// (what an argument costs: the Store sends the not-after bound and the
// request id that the floor lacks); the floor's with a TIME call (what the
// server time costs: the Store's grants and renewals read it, the floor's
// let PX count from the server's clock unseen); the Store's; and the
// floor's and the Store's run as functions (FCALL) instead of EVALSHA.
func TestScriptCostParts(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("LEASE_SCRIPT_COST_PARTS"))
	if n <= 0 {
		t.Skip("set LEASE_SCRIPT_COST_PARTS=N to measure the parts of the scripts' server cost")
	}
	const rounds = 3
	underCallgrind(t)
	srv := privateServer(t, testserver.RedisOptions{})
	cg := serverCallgrind(t, srv)
	c := newClient(t, srv.Addr())
	ctx := context.Background()

	const (
		owner = "owner-a-0123456789abcdef"
		ms    = "60000"
		ttl   = "60000000"
		na    = "9000000000000000" // a bound far ahead: checked, never hit
		id    = "1234567890123456"
	)
	floorVal, storeVal := owner+":17", ttl+":17:"+owner
	withTime := func(src string) string { return "local now = redis.call('TIME')\n" + src }
	var parts []costPart
	add := func(op string, floor, store string, fv, sv string, token bool, fargs, sargs []string) {
		parts = append(parts,
			costPart{op: op, name: "floor", src: floor, value: fv, token: token, args: fargs},
			costPart{op: op, name: "floor + 2 arguments", src: floor, value: fv, token: token, args: append(slices.Clone(fargs), na, id)},
			costPart{op: op, name: "floor + TIME", src: withTime(floor), value: fv, token: token, args: fargs},
			costPart{op: op, name: "store", src: store, value: sv, token: token, args: sargs},
			costPart{op: op, name: "floor, FCALL", src: floor, fcall: true, value: fv, token: token, args: fargs},
			costPart{op: op, name: "store, FCALL", src: store, fcall: true, value: sv, token: token, args: sargs},
		)
	}
	add("acquire", floorAcquireSrc, valkey.SrcAcquire, "", "", true, []string{owner, ms}, []string{owner, ttl, na, id})
	add("acquire, contended", floorAcquireSrc, valkey.SrcAcquire, floorVal, storeVal, true, []string{owner, ms}, []string{owner, ttl, na, id})
	add("renew", floorRenewSrc, valkey.SrcRenew, floorVal, storeVal, false, []string{floorVal, ms}, []string{storeVal, ttl, na, id})
	add("release", floorReleaseSrc, valkey.SrcRelease, floorVal, storeVal, false, []string{floorVal}, []string{storeVal, id})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range parts {
		p := &parts[i]
		if p.fcall {
			fn := "leasecost" + strconv.Itoa(i)
			must(c.Do(ctx, c.B().FunctionLoad().FunctionCode(asFunction(fn, fn, p.src)).Build()).Error())
		}
	}
	call := func(i int, keys []string) vk.Completed {
		p := parts[i]
		if p.fcall {
			return c.B().Fcall().Function("leasecost" + strconv.Itoa(i)).Numkeys(int64(len(keys))).Key(keys...).Arg(p.args...).Build()
		}
		return c.B().Eval().Script(p.src).Numkeys(int64(len(keys))).Key(keys...).Arg(p.args...).Build()
	}
	evalsha := func(i int, keys []string) vk.Completed {
		p := parts[i]
		return c.B().Evalsha().Sha1(valkey.SHA1Hex(p.src)).Numkeys(int64(len(keys))).Key(keys...).Arg(p.args...).Build()
	}

	samples := make([][]float64, len(parts))
	for r := range rounds {
		for i, p := range parts {
			keys := make([][]string, n)
			for j := range keys {
				tag := fmt.Sprintf("f:{c/%d-%d-%d}", r, i, j)
				keys[j] = []string{tag + ":lease"}
				if p.token {
					keys[j] = append(keys[j], tag+":token")
				}
				if p.value != "" {
					must(c.Do(ctx, c.B().Set().Key(keys[j][0]).Value(p.value).PxMilliseconds(600000).Build()).Error())
				}
			}
			// The first call loads the script (EVAL), outside the count.
			if r == 0 && !p.fcall {
				must(ignoreNil(c.Do(ctx, call(i, []string{"f:{w}:lease", "f:{w}:token"}[:len(keys[0])])).Error()))
			}
			cmd := evalsha
			if p.fcall {
				cmd = call
			}
			cg.zero(t)
			for _, k := range keys {
				must(c.Do(ctx, cmd(i, k)).Error())
			}
			samples[i] = append(samples[i], cg.instructions(t)/float64(n)/1000)
		}
	}

	median := func(xs []float64) float64 {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "server instructions per call (k), callgrind; median of %d rounds of %d calls\n", rounds, n)
	fmt.Fprintf(&b, "%-20s %-22s %8s %7s\n", "operation", "script", "k/call", "/floor")
	var floor float64
	for i, p := range parts {
		m := median(samples[i])
		if p.name == "floor" {
			floor = m
		}
		fmt.Fprintf(&b, "%-20s %-22s %8.2f %6.2fx\n", p.op, p.name, m, m/floor)
	}
	t.Log("\n" + b.String())
}

// ignoreNil drops a nil reply's error.
func ignoreNil(err error) error {
	if vk.IsValkeyNil(err) {
		return nil
	}
	return err
}
