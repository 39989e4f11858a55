package valkey

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// The not-after bound.
//
// A mutation that the server holds back (CLIENT PAUSE, a busy script, a
// slow replica link in front of it) can run after its caller gave up. To
// make such a late execution a no-op, TryAcquire, Renew and RenewBatch send
// the latest server time at which the script may still write: the call's
// ctx deadline, translated into server time. The script compares it with
// its own TIME reading and writes nothing past it (statusLate).
//
// The translation needs no clock synchronisation, only the assumption that
// both clocks run at the same rate. A reply that carries the server's time
// S, to a request sent at local monotonic instant s, proves that the
// server's clock read S at some instant r >= s. So at any later local
// instant t the server's clock reads S + (t - r) <= S + (t - s): an upper
// bound, never an underestimate. The bound of a request sent at t with
// budget = deadline - t is therefore
//
//	notAfter = S + (t - s) + budget + slack
//
// which is at least the server's time at the caller's deadline: a request
// that runs before its caller's deadline is never refused (absent the
// clock jumps below). It overshoots that deadline by the observation's own
// delay (s to r, at most its round trip) plus the slack.
//
// slack is bootSlack plus age/rateSlack, age = t - s: 1ms for the rounding
// to microseconds on both sides, and 1000 ppm of the observation's age for
// a difference in rate between the two clocks (an NTP-disciplined clock
// slews at most 500 ppm; a free-running quartz is off by well under 100
// ppm). Only the latest observation is kept: an older one has had more time
// to drift.
//
// Before the Store has an observation (its first mutations), and for a
// call without a ctx deadline, the bound is 0: none. Bootstrapping with an
// extra TIME round trip was not worth it: the first request of a process is
// no worse off than before the bound existed (a late acquisition leaves an
// orphan grant that expires at its TTL, a late renewal delays the next
// holder), and every reply to an acquisition or renewal refreshes the
// estimate.
//
// If the server's clock steps forward, the estimate is too low and a prompt
// request can be refused as late: it fails closed, with a definite "not
// applied" error, and its reply carries the server's time, so the next
// request uses the corrected estimate. A backward step makes the bound too
// lenient until the next reply.
const (
	bootSlack = time.Millisecond
	rateSlack = 1000 // the age is divided by this: 1000 ppm

	// maxExact is the largest bound sent: Lua numbers are doubles, exact to
	// 2^53 µs (about 285 years after 1970). A later bound is as good as none.
	maxExact = 1 << 53
)

// serverClock is one observation of the server's clock: a reply carried
// server time (µs since the epoch) for a request sent at local monotonic
// instant sent (µs since the Store's origin).
type serverClock struct {
	server, sent int64
}

// clockEstimate is a Store's knowledge of the server's clock: the latest
// observation. Safe for concurrent use, and without allocation (every
// acquisition and renewal publishes one, so a pointer to a fresh
// observation cost them an allocation each): the observation's two fields
// are guarded by a sequence counter, odd while a writer stores them, and
// a reader retries until it read both between the same even count. A
// reply to an older request never replaces the observation of a newer
// one.
type clockEstimate struct {
	origin time.Time // monotonic reading; sent instants are measured from it

	seq          atomic.Uint64
	server, sent atomic.Int64 // server 0: no observation yet
}

func newClockEstimate() *clockEstimate { return &clockEstimate{origin: time.Now()} }

// now returns the local monotonic instant, in µs since origin, and the
// wall-clock reading it was taken from.
func (c *clockEstimate) now() (int64, time.Time) {
	t := time.Now()
	return t.Sub(c.origin).Microseconds(), t
}

// load returns the latest observation (ok false: none yet) and the
// sequence count it was read at, for publish. A writer holds the count odd
// for two stores; a reader that meets it yields and retries.
func (c *clockEstimate) load() (obs serverClock, ok bool, seq uint64) {
	for {
		seq = c.seq.Load()
		if seq&1 == 0 {
			obs = serverClock{server: c.server.Load(), sent: c.sent.Load()}
			if c.seq.Load() == seq {
				return obs, obs.server > 0, seq
			}
		}
		runtime.Gosched()
	}
}

// latest returns the latest observation, nil when there is none.
func (c *clockEstimate) latest() *serverClock {
	if obs, ok, _ := c.load(); ok {
		return &obs
	}
	return nil
}

// publish replaces the observation read at sequence count seq by obs; it
// fails if another writer published since.
func (c *clockEstimate) publish(seq uint64, obs serverClock) bool {
	if !c.seq.CompareAndSwap(seq, seq+1) {
		return false
	}
	c.server.Store(obs.server)
	c.sent.Store(obs.sent)
	c.seq.Store(seq + 2)
	return true
}

// observe records that a reply carried server time server for a request
// sent at local instant sent (from now). Non-positive server times are
// ignored (not a server clock).
func (c *clockEstimate) observe(server, sent int64) {
	if server <= 0 {
		return
	}
	for {
		cur, ok, seq := c.load()
		if ok && cur.sent > sent {
			return // a newer request's observation is already in
		}
		if ok && cur.sent == sent && cur.server <= server {
			return // same request instant: keep the lower (tighter) reading
		}
		if c.publish(seq, serverClock{server: server, sent: sent}) {
			return
		}
	}
}

// bound returns the not-after argument for a request about to be sent
// under ctx, and the local instant to pass to observe with its reply.
func (c *clockEstimate) bound(ctx context.Context) (arg string, sent int64) {
	na, sent := c.boundMicros(ctx)
	return strconv.FormatInt(na, 10), sent
}

// boundMicros is bound with the not-after bound as a number (0: none).
func (c *clockEstimate) boundMicros(ctx context.Context) (na, sent int64) {
	sent, wall := c.now()
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, sent
	}
	return notAfter(c.latest(), sent, dl.Sub(wall)), sent
}

// notAfter is the bound, in server µs, for a request sent at local instant
// t with budget left before its deadline, given the latest observation
// (nil: none); 0 means no bound. See the comment at the top of this file.
func notAfter(obs *serverClock, t int64, budget time.Duration) int64 {
	if obs == nil {
		return 0
	}
	// t - obs.sent may be negative (the observation came from a request
	// sent after this one was stamped): the bound holds all the same.
	elapsed := t - obs.sent
	slack := bootSlack.Microseconds() + max(elapsed, 0)/rateSlack
	// obs.server is a reply's int64, elapsed is bounded by the process's
	// lifetime and budget by time.Duration's range, so only the sum can
	// leave the range: saturate at maxExact, step by step.
	b := obs.server + elapsed
	if b >= maxExact || budget.Microseconds() >= maxExact-b-slack {
		return maxExact
	}
	// A bound must be positive (0 means none): a deadline long past is a
	// bound in the distant past.
	return max(b+budget.Microseconds()+slack, 1)
}
