package valkey

import (
	"context"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/leaseapi"
)

// batchChunk is the most renewals one batch script handles: enough to make
// the per-call overhead negligible, few enough (about a millisecond of
// server time) not to stall other clients while it runs.
const batchChunk = 256

// unit is one script call of a batch: the request indexes it covers, its
// keys and arguments, and its request id (each call has its own, so that
// replies swapped within the pipeline are caught too).
type unit struct {
	elems []int
	keys  []string
	args  []string
	id    int64
	ida   string // id's text
}

// RenewBatch implements [leaseapi.BatchRenewer]. Each element has exactly
// the semantics of [Store.Renew]; results are in request order. Invalid
// elements fail alone with [leaseapi.ErrInvalidState] and are not sent; a
// ctx already done fails every element with its context error.
//
// Renewals share round trips. On a standalone or Sentinel-managed server,
// the valid requests go in chunks of up to 256 to one batch script (one
// TIME reading, all checks before any write) and all chunks are pipelined
// in one DoMulti: one round trip for any number of leases. With a Cluster
// client, whose leases live on different slots, each request is its own
// renew script and the pipeline is split per node: one round trip per node.
// EVALSHA is resent as EVAL only for the calls answered NOSCRIPT (which did
// not run). A call whose reply is lost fails its elements with
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
	chunk := batchChunk
	src, sha := srcRenewBatch, shaRenewBatch
	if s.client.Mode() == vk.ClientModeCluster {
		chunk = 1
		src, sha = srcRenew, shaRenew
	}
	na, sent := s.clock.bound(ctx)
	units := make([]unit, 0, (len(valid)+chunk-1)/chunk)
	var ttl time.Duration // the TTL whose text ttla is: a batch's TTLs are mostly one
	var ttla string
	// A unit's key names and values are built in one buffer that becomes
	// one string (TestRenewBatchAllocs): ends[2n] ends the n-th key,
	// ends[2n+1] its value.
	var buf []byte
	ends := make([]int, 0, 2*min(chunk, len(valid)))
	for start := 0; start < len(valid); start += chunk {
		elems := valid[start:min(start+chunk, len(valid))]
		u := unit{elems: elems, keys: make([]string, 0, len(elems)), args: make([]string, 0, 2*len(elems)+2)}
		buf, ends = buf[:0], ends[:0]
		for _, i := range elems {
			r := reqs[i]
			buf = appendKey(buf, s.prefix, r.Record.Key, leaseSuffix)
			ends = append(ends, len(buf))
			buf = appendValue(buf, r.Record, r.TTL)
			ends = append(ends, len(buf))
		}
		all, from := string(buf), 0
		for n, i := range elems {
			if r := reqs[i]; ttla == "" || r.TTL != ttl {
				ttl, ttla = r.TTL, micros(r.TTL)
			}
			u.keys = append(u.keys, all[from:ends[2*n]])
			u.args = append(u.args, all[ends[2*n]:ends[2*n+1]], ttla)
			from = ends[2*n+1]
		}
		// srcRenew and srcRenewBatch alike: the bound, then the id.
		u.id, u.ida = newRequestID()
		u.args = append(u.args, na, u.ida)
		units = append(units, u)
	}

	b := s.client.B()
	cmds := make(vk.Commands, len(units))
	for j, u := range units {
		cmds[j] = b.Evalsha().Sha1(sha).Numkeys(int64(len(u.keys))).Key(u.keys...).Arg(u.args...).Build()
	}
	res := s.client.DoMulti(ctx, cmds...)
	var again []int
	for j, r := range res {
		if ve, ok := vk.IsValkeyErr(r.Error()); ok && ve.IsNoScript() {
			again = append(again, j)
		}
	}
	if len(again) > 0 {
		retry := make(vk.Commands, len(again))
		for k, j := range again {
			u := units[j]
			retry[k] = b.Eval().Script(src).Numkeys(int64(len(u.keys))).Key(u.keys...).Arg(u.args...).Build()
		}
		for k, r := range s.client.DoMulti(ctx, retry...) {
			res[again[k]] = r
		}
	}

	for j, u := range units {
		if chunk == 1 {
			i := u.elems[0]
			out[i].Record, out[i].Err = s.decodeRenew(res[j], u.ida, reqs[i].Record, reqs[i].TTL, op, sent)
			continue
		}
		if _, err := res[j].ToString(); err == nil {
			// A one-line reply: the batch ran late (or is not ours).
			status, payload, err := line(res[j], u.ida, op, true)
			if err == nil {
				var now int64
				if now, err = batchLate(status, payload, op); now > 0 {
					s.clock.observe(now, sent)
				}
			}
			for _, i := range u.elems {
				out[i].Err = err
			}
			continue
		}
		vals, err := ints(res[j], u.id, op, true)
		if now, ok := batchTime(vals, u.elems, reqs); ok && err == nil {
			s.clock.observe(now, sent)
		}
		decodeBatch(vals, err, u.elems, reqs, out, op)
	}
	return out
}

// batchLate interprets a batch script's one-line reply: "late", with the
// server time it carries, or a reply of the wrong shape.
func batchLate(status int, payload, op string) (int64, error) {
	if now, ok := lateTime(status, payload); ok {
		return now, leaseapi.LateError(op)
	}
	return 0, protocolError(op, true)
}

// batchTime returns the server time that a batch script's array reply
// carries: the acquired time of its first renewed element (all share one
// TIME reading; rounded up by less than 1ms, as acquireResult says). A
// batch that renewed nothing carries none.
func batchTime(vals []int64, elems []int, reqs []leaseapi.RenewRequest) (int64, bool) {
	for n := 0; n+1 < len(vals) && n/2 < len(elems); n += 2 {
		if vals[n] == statusOK {
			return expiryMicros(vals[n+1]) - reqs[elems[n/2]].TTL.Microseconds(), true
		}
	}
	return 0, false
}

// decodeBatch decodes a batch script's array reply (vals without the
// request id, or the call's error as ints returns it), two integers per
// element (status, and the expiry in ms minus 1), into out.
func decodeBatch(vals []int64, err error, elems []int, reqs []leaseapi.RenewRequest, out []leaseapi.RenewResult, op string) {
	if err == nil && len(vals) != 2*len(elems) {
		err = protocolError(op, true)
	}
	for n, i := range elems {
		if err != nil {
			out[i].Err = err
			continue
		}
		switch vals[2*n] {
		case statusOK:
			rec := reqs[i].Record
			e := expiryMicros(vals[2*n+1])
			got, ok := grant(rec.Key, rec.Owner, int64(rec.Token), e-reqs[i].TTL.Microseconds(), e)
			if !ok {
				out[i].Err = protocolError(op, true)
				continue
			}
			out[i].Record = got
		case statusStale:
			out[i].Err = leaseapi.NewError(op, leaseapi.ErrStaleOwner, "")
		default:
			out[i].Err = protocolError(op, true)
		}
	}
}
