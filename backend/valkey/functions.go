package valkey

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"
)

// The scripts run as functions.
//
// Every script of scripts.go is also a function of one library, and a
// Store calls it with FCALL: the server then skips the per-call work of
// EVALSHA (the SHA-1 lookup, the KEYS and ARGV globals), 2.0-5.7k of the
// 25-60k instructions a call costs it (TestScriptCostParts: release 28.45k
// by EVALSHA, 26.08k by FCALL, the floor's EVALSHA 25.06k; a contended
// acquisition 26.91k, 24.23k, 23.09k; a renewal 46.65k, 40.98k, 28.67k).
//
// The library is loaded lazily: a Store does no I/O before its first
// operation, and a server may lose its functions (a restart without
// persistence, FUNCTION FLUSH, a new Cluster node) or refuse them (an ACL
// user without FCALL or FUNCTION LOAD, a server or proxy without
// functions). So a call that FCALL cannot run falls back to the script by
// EVALSHA (and EVAL on NOSCRIPT), the path every server runs:
//
//   - A server error reply to FCALL means the function wrote nothing (as
//     for any script of ours, see classify): resending the operation by
//     EVALSHA is safe, as valkey-go's own EVAL after NOSCRIPT is. Any other
//     failure (a lost reply) is returned as it is: the function may have
//     run, and nothing is resent.
//   - After such an error one caller at a time loads the library (FUNCTION
//     LOAD REPLACE; on a Cluster, on every node, replicas refusing) while
//     the others go straight to EVALSHA. A load that every node refused
//     turns FCALL off for functionRetry: the Store then uses EVALSHA alone, and a
//     Store whose user may not load functions costs one refused FCALL and
//     one refused load per functionRetry.
//
// The library's name and its functions' names carry a digest of the
// scripts' sources ("lease_" + 16 hex digits), so that Stores of different
// versions of this package share a server, each calling its own code; a
// library of an older version stays loaded until an operator removes it
// (FUNCTION DELETE), which only costs its Stores a reload.

// functionRetry is how long a Store whose library load failed uses EVALSHA
// alone before it tries FCALL again.
const functionRetry = time.Minute

// function is one script: its source and its EVALSHA/EVAL fallback (lua,
// never the retryable variant), and the name it has in the library.
type function struct {
	name string
	src  string
	sha  string // the SHA-1 EVALSHA names src by
	lua  *vk.Lua
}

// libraryID is the digest of every script's source that names the library
// and its functions.
var libraryID = "lease_" + sha1hex(strings.Join([]string{
	srcAcquire, srcAcquireMarking, srcAcquireWatching, srcAcquireTurn, srcRenew, srcRenewBatch, srcValidate,
	srcRelease, srcReleaseEnded, srcInspect, srcGuard, srcPassTurn,
}, "\x00"))[:16]

func newFunction(op, src string) *function {
	return &function{name: libraryID + "_" + op, src: src, sha: sha1hex(src), lua: vk.NewLuaScript(src)}
}

// The functions; stateless, safe for concurrent use.
var (
	fnAcquire   = newFunction("acquire", srcAcquire)
	fnMarking   = newFunction("acquire_marking", srcAcquireMarking)
	fnWatching  = newFunction("acquire_watching", srcAcquireWatching)
	fnTurn      = newFunction("acquire_turn", srcAcquireTurn)
	fnRenew     = newFunction("renew", srcRenew)
	fnBatch     = newFunction("renew_batch", srcRenewBatch)
	fnValidate  = newFunction("validate", srcValidate)
	fnRelease   = newFunction("release", srcRelease)
	fnEnded     = newFunction("release_ended", srcReleaseEnded)
	fnInspect   = newFunction("inspect", srcInspect)
	fnGuard     = newFunction("guard", srcGuard)
	fnPassTurn  = newFunction("pass_turn", srcPassTurn)
	libraryCode = library(fnAcquire, fnMarking, fnWatching, fnTurn, fnRenew, fnBatch, fnValidate, fnRelease, fnEnded, fnInspect, fnGuard, fnPassTurn)
)

// library is the FUNCTION LOAD text of fns: each script's body (after its
// "#!lua" line) as the callback of its function, KEYS and ARGV its
// parameters, with the flags its shebang line declares.
func library(fns ...*function) string {
	var b strings.Builder
	b.WriteString("#!lua name=" + libraryID + "\n")
	for _, f := range fns {
		shebang, body := "", f.src
		if strings.HasPrefix(body, "#!") {
			shebang, body, _ = strings.Cut(body, "\n")
		}
		flags := ""
		if fl, ok := strings.CutPrefix(shebang, "#!lua flags="); ok {
			flags = "'" + strings.ReplaceAll(fl, ",", "','") + "'"
		}
		b.WriteString("redis.register_function{function_name='" + f.name + "', flags={" + flags + "}, callback=function(KEYS, ARGV)\n")
		b.WriteString(body)
		b.WriteString("\nend}\n")
	}
	return b.String()
}

// functionState is a Store's knowledge of its library on the server.
// Safe for concurrent use.
type functionState struct {
	offUntil atomic.Int64 // unix ns before which FCALL is not tried; 0: try it
	loading  atomic.Bool  // a caller is loading the library
}

// use reports whether to call by FCALL now.
func (fs *functionState) use() bool {
	off := fs.offUntil.Load()
	return off == 0 || time.Now().UnixNano() >= off
}

// fcall builds the FCALL of f.
func fcall(b vk.Builder, f *function, keys, args []string) vk.Completed {
	return b.Fcall().Function(f.name).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// refused reports a server error reply: the function wrote nothing.
func refused(res vk.ValkeyResult) bool {
	_, ok := vk.IsValkeyErr(res.Error())
	return ok
}

// run calls f by FCALL, or by EVALSHA where the server cannot run it (see
// the top of this file).
func (s *Store) run(ctx context.Context, f *function, keys, args []string) vk.ValkeyResult {
	if s.fns.use() {
		res := s.client.Do(ctx, fcall(s.client.B(), f, keys, args))
		if !refused(res) {
			return res
		}
		s.loadLibrary(ctx)
	}
	return f.lua.Exec(ctx, s.client, keys, args)
}

// loadLibrary loads the library after an FCALL was refused, unless
// another caller is doing it. A load that every node refused (an error
// reply) turns FCALL off for functionRetry; one that failed otherwise (the
// refused call's ctx, which bounds it, ended) changes nothing.
func (s *Store) loadLibrary(ctx context.Context) {
	if !s.fns.loading.CompareAndSwap(false, true) {
		return
	}
	defer s.fns.loading.Store(false)
	nodes := map[string]vk.Client{"": s.client}
	if s.client.Mode() == vk.ClientModeCluster {
		nodes = s.client.Nodes()
	}
	loaded, refusals := 0, 0
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().Replace().FunctionCode(libraryCode).Build()).Error()
		if err == nil {
			loaded++
		} else if _, ok := vk.IsValkeyErr(err); ok {
			refusals++
		}
	}
	switch {
	case loaded > 0:
		s.fns.offUntil.Store(0)
	case refusals == len(nodes):
		s.fns.offUntil.Store(time.Now().Add(functionRetry).UnixNano())
	}
}

// runMulti calls f once per unit in one pipeline (DoMulti), by FCALL where
// the server can, and resends only the calls that were refused (which did
// not run): by EVALSHA those FCALL could not run, then by EVAL those
// answered NOSCRIPT. The results are in unit order.
func (s *Store) runMulti(ctx context.Context, f *function, units []unit) []vk.ValkeyResult {
	b := s.client.B()
	evalsha := func(u unit) vk.Completed {
		return b.Evalsha().Sha1(f.sha).Numkeys(int64(len(u.keys))).Key(u.keys...).Arg(u.args...).Build()
	}
	useFn := s.fns.use()
	cmds := make(vk.Commands, len(units))
	for j, u := range units {
		if useFn {
			cmds[j] = fcall(b, f, u.keys, u.args)
		} else {
			cmds[j] = evalsha(u)
		}
	}
	res := s.client.DoMulti(ctx, cmds...)
	resend := func(again []int, build func(u unit) vk.Completed) {
		if len(again) == 0 {
			return
		}
		retry := make(vk.Commands, len(again))
		for k, j := range again {
			retry[k] = build(units[j])
		}
		for k, r := range s.client.DoMulti(ctx, retry...) {
			res[again[k]] = r
		}
	}
	if useFn {
		var again []int
		for j, r := range res {
			if refused(r) {
				again = append(again, j)
			}
		}
		if len(again) > 0 {
			s.loadLibrary(ctx)
		}
		resend(again, evalsha)
	}
	var again []int
	for j, r := range res {
		if ve, ok := vk.IsValkeyErr(r.Error()); ok && ve.IsNoScript() {
			again = append(again, j)
		}
	}
	resend(again, func(u unit) vk.Completed {
		return b.Eval().Script(f.src).Numkeys(int64(len(u.keys))).Key(u.keys...).Arg(u.args...).Build()
	})
	return res
}
