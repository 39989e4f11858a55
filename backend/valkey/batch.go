package valkey

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/leaseapi"
)

// batchChunk is the most renewals one batch script handles: enough to make
// the per-call overhead negligible, few enough (about a millisecond of
// server time) not to stall other clients while it runs.
const batchChunk = 256

// unit is one script call of a batch: the request indexes it covers, its
// keys and arguments, and its request id's text (each call has its own,
// so that replies swapped within the pipeline are caught too).
type unit struct {
	elems []int
	keys  []string
	args  []string
	ida   string
}

// RenewBatch implements [leaseapi.BatchRenewer]. Each element has exactly
// the semantics of [Store.Renew]; results are in request order. Invalid
// elements fail alone with [leaseapi.ErrInvalidState] and are not sent; a
// ctx already done fails every element with its context error.
//
// Renewals share round trips. On a standalone or Sentinel-managed server,
// the valid requests go in chunks of up to 256 renewals of one TTL to one
// batch script (one TIME reading, all checks before any write, one
// expiry for all) and all chunks are pipelined in one DoMulti: one round
// trip for any number of leases. With a Cluster client, whose leases live
// on different slots, each request is its own renew script and the
// pipeline is split per node: one round trip per node. EVALSHA is resent
// as EVAL only for the calls answered NOSCRIPT (which did not run). A
// call whose reply is lost fails its elements with
// [leaseapi.ErrAmbiguousOutcome]. Never retried. Every call carries the
// not-after bound of ctx's deadline, as Renew's does; a call the server
// runs past it writes nothing and fails its elements with
// [leaseapi.ErrBackendUnavailable].
func (s *Store) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	const op = "renew batch"
	if s.zero() {
		out := make([]leaseapi.RenewResult, len(reqs))
		for i := range out {
			out[i].Err = errZeroStore(op)
		}
		return out
	}
	out, valid := leaseapi.CheckRenewBatch(ctx, op, reqs)
	if len(valid) == 0 {
		return out
	}
	cluster := s.client.Mode() == vk.ClientModeCluster
	na, sent := s.clock.bound(ctx)
	var units []unit
	if cluster {
		units = s.renewUnits(valid, reqs, na)
	} else {
		units = s.batchUnits(valid, reqs, na)
	}
	f := fnBatch
	if cluster {
		f = fnRenew
	}
	res := s.runMulti(ctx, f, units)

	for j, u := range units {
		if cluster {
			i := u.elems[0]
			out[i].Record, out[i].Err = s.decodeRenew(res[j], u.ida, reqs[i].Record, reqs[i].TTL, op, sent)
			continue
		}
		status, payload, err := line(res[j], u.ida, op, true)
		if now := batchResult(status, payload, err, u.elems, reqs, out, op); now > 0 {
			s.clock.observe(now, sent)
		}
	}
	return out
}

// batchUnits forms the batch script calls of the valid requests: chunks
// of up to batchChunk renewals of one TTL, in request order within a TTL.
// A call's key names and values are built in one buffer that becomes one
// string (TestRenewBatchAllocs).
func (s *Store) batchUnits(valid []int, reqs []leaseapi.RenewRequest, na string) []unit {
	if !slices.IsSortedFunc(valid, byTTL(reqs)) {
		// A batch's TTLs are mostly one; valid is RenewBatch's own.
		slices.SortStableFunc(valid, byTTL(reqs))
	}
	units := make([]unit, 0, (len(valid)+batchChunk-1)/batchChunk)
	var buf []byte
	ends := make([]int, 0, min(batchChunk, len(valid)))
	for start := 0; start < len(valid); {
		ttl := reqs[valid[start]].TTL
		end := start + 1
		for end < len(valid) && end-start < batchChunk && reqs[valid[end]].TTL == ttl {
			end++
		}
		elems := valid[start:end]
		start = end
		size := 20 // the id
		for _, i := range elems {
			r := &reqs[i].Record
			size += len(s.prefix) + len(r.Key.Namespace()) + len(r.Key.Name()) + len(leaseSuffix) + 4 + 42 + len(r.Owner)
		}
		buf, ends = slices.Grow(buf[:0], size), ends[:0] // escapes may grow it once more
		for _, i := range elems {
			buf = appendKey(buf, s.prefix, reqs[i].Record.Key, leaseSuffix)
			ends = append(ends, len(buf))
		}
		for _, i := range elems {
			buf = appendValue(buf, reqs[i].Record, ttl)
			ends = append(ends, len(buf))
		}
		id := len(buf)
		buf = strconv.AppendInt(buf, newRequestIDValue(), 10)
		all, from := string(buf), 0
		u := unit{elems: elems, keys: make([]string, len(elems)), args: make([]string, 0, len(elems)+3), ida: all[id:]}
		for n := range elems {
			u.keys[n], from = all[from:ends[n]], ends[n]
		}
		for n := range elems {
			u.args, from = append(u.args, all[from:ends[len(elems)+n]]), ends[len(elems)+n]
		}
		// The TTL's text is the start of every value.
		u.args = append(u.args, u.args[0][:ttlLen(ttl)], na, u.ida)
		units = append(units, u)
	}
	return units
}

// byTTL orders request indexes by their TTL.
func byTTL(reqs []leaseapi.RenewRequest) func(a, b int) int {
	return func(a, b int) int { return cmp.Compare(reqs[a].TTL, reqs[b].TTL) }
}

// renewUnits forms one renew script call per valid request (Cluster).
func (s *Store) renewUnits(valid []int, reqs []leaseapi.RenewRequest, na string) []unit {
	units := make([]unit, len(valid))
	for n, i := range valid {
		r := reqs[i]
		var buf []byte
		buf = appendKey(buf, s.prefix, r.Record.Key, leaseSuffix)
		k := len(buf)
		buf = appendValue(buf, r.Record, r.TTL)
		id := len(buf)
		buf = strconv.AppendInt(buf, newRequestIDValue(), 10)
		all := string(buf)
		// srcRenew: the expected value, the TTL (its start), the bound, the id.
		units[n] = unit{elems: valid[n : n+1], keys: []string{all[:k]}, args: []string{all[k:id], all[k : k+ttlLen(r.TTL)], na, all[id:]}, ida: all[id:]}
	}
	return units
}

// batchResult interprets a batch script's reply (status and payload,
// after line, or the call's error) for its elements into out, and
// returns the server time it carries (0: none): the renewal time (the
// expiry minus the TTL, the script's TIME rounded up by less than 1ms,
// as acquireResult says) or the late reply's now.
func batchResult(status int, payload string, err error, elems []int, reqs []leaseapi.RenewRequest, out []leaseapi.RenewResult, op string) int64 {
	var now int64
	switch {
	case err != nil:
	case status == statusLate:
		var ok bool
		if now, ok = lateTime(status, payload); ok {
			err = leaseapi.LateError(op)
		} else {
			err = protocolError(op, true)
		}
	case status != statusOK:
		err = protocolError(op, true)
	}
	if err != nil {
		for _, i := range elems {
			out[i].Err = err
		}
		return now
	}
	est, sts, _ := strings.Cut(payload, " ")
	es, ok := parseInt(est)
	if !ok || len(sts) != len(elems) {
		for _, i := range elems {
			out[i].Err = protocolError(op, true)
		}
		return 0
	}
	e := expiryMicros(es)
	ttl := reqs[elems[0]].TTL.Microseconds() // a call's elements share one TTL
	for n, i := range elems {
		switch sts[n] {
		case '1':
			rec := reqs[i].Record
			got, ok := grant(rec.Key, rec.Owner, int64(rec.Token), e-ttl, e)
			if !ok {
				out[i].Err = protocolError(op, true)
				continue
			}
			out[i].Record = got
		case '3':
			out[i].Err = leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
		default:
			out[i].Err = protocolError(op, true)
		}
	}
	return e - ttl
}
