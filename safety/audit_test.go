package safety_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/internal/serveraudit"
	"github.com/leasekit/lease/leaseapi"
)

// The server-side audit of the real-server tier (internal/serveraudit):
// what the server really committed to the env's keys, read back at the end
// of each repetition and checked by itself (C1) and against every call the
// env's stores were asked for (C4).
//
// PostgreSQL: migrate installs the audit trigger in the env's schema.
// Valkey: the private server runs with the append-only file and no AOF
// rewrite; the env's key prefix selects its keys.

// callLog records every mutation the env's stores were asked for, as the
// caller saw it. It is safe for concurrent use.
type callLog struct {
	mu    sync.Mutex
	calls []serveraudit.Call
	done  []bool
}

func (l *callLog) begin(c serveraudit.Call) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c.Sent = time.Now()
	l.calls = append(l.calls, c)
	l.done = append(l.done, false)
	return len(l.calls) - 1
}

func (l *callLog) end(i int, rec leaseapi.Record, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &l.calls[i]
	c.Returned = time.Now()
	l.done[i] = true
	switch kind := leaseapi.Kind(err); {
	case err == nil:
		c.Outcome = serveraudit.OK
		if c.Op != serveraudit.OpRelease {
			c.Token, c.Acquired, c.Expires = uint64(rec.Token), rec.AcquiredAt, rec.ExpiresAt
		}
	case kind == leaseapi.ErrAmbiguousOutcome:
		c.Outcome, c.Err = serveraudit.Ambiguous, err.Error()
	default:
		// The whole (redacted) error: its fixed detail tells which path
		// refused the call.
		c.Outcome, c.Err = serveraudit.Refused, err.Error()
	}
}

// snapshot returns the calls; one that has not returned counts as
// ambiguous (its outcome is open).
func (l *callLog) snapshot() []serveraudit.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]serveraudit.Call(nil), l.calls...)
	for i := range out {
		if !l.done[i] {
			out[i].Outcome, out[i].Err = serveraudit.Ambiguous, "in flight"
		}
	}
	return out
}

// recorded is a store of the env that records its mutations in log. It
// forwards Inspect, WatchRelease and RenewBatch, and claims the store's own
// capabilities (batching, Adopt), so the runtime treats it as the store.
type recorded struct {
	b    leaseapi.Backend
	name string
	log  *callLog
}

// Capabilities implements leaseapi.Capable: the store's claims.
func (r *recorded) Capabilities() leaseapi.Capabilities { return leaseapi.CapabilitiesOf(r.b) }

func (r *recorded) TryAcquire(ctx context.Context, k leaseapi.Key, owner string, ttl time.Duration) (leaseapi.Record, error) {
	i := r.log.begin(serveraudit.Call{Client: r.name, Op: serveraudit.OpAcquire, Key: k.String(), Owner: owner})
	rec, err := r.b.TryAcquire(ctx, k, owner, ttl)
	r.log.end(i, rec, err)
	return rec, err
}

func (r *recorded) Renew(ctx context.Context, in leaseapi.Record, ttl time.Duration) (leaseapi.Record, error) {
	i := r.log.begin(serveraudit.Call{Client: r.name, Op: serveraudit.OpRenew, Key: in.Key.String(), Owner: in.Owner, Token: uint64(in.Token)})
	rec, err := r.b.Renew(ctx, in, ttl)
	r.log.end(i, rec, err)
	return rec, err
}

func (r *recorded) Validate(ctx context.Context, rec leaseapi.Record) (leaseapi.Record, error) {
	return r.b.Validate(ctx, rec)
}

func (r *recorded) Release(ctx context.Context, rec leaseapi.Record) error {
	i := r.log.begin(serveraudit.Call{Client: r.name, Op: serveraudit.OpRelease, Key: rec.Key.String(), Owner: rec.Owner, Token: uint64(rec.Token)})
	err := r.b.Release(ctx, rec)
	r.log.end(i, leaseapi.Record{}, err)
	return err
}

func (r *recorded) Inspect(ctx context.Context, k leaseapi.Key) (leaseapi.Record, bool, error) {
	in, ok := r.b.(leaseapi.Inspector)
	if !ok {
		return leaseapi.Record{}, false, leaseapi.NewError("inspect", leaseapi.ErrInvalidState, "not supported")
	}
	return in.Inspect(ctx, k)
}

func (r *recorded) WatchRelease(k leaseapi.Key) (<-chan struct{}, func()) {
	if w, ok := r.b.(leaseapi.ReleaseWatcher); ok {
		return w.WatchRelease(k)
	}
	return nil, func() {}
}

func (r *recorded) RenewBatch(ctx context.Context, reqs []leaseapi.RenewRequest) []leaseapi.RenewResult {
	ids := make([]int, len(reqs))
	for j, q := range reqs {
		ids[j] = r.log.begin(serveraudit.Call{Client: r.name, Op: serveraudit.OpRenew, Key: q.Record.Key.String(), Owner: q.Record.Owner, Token: uint64(q.Record.Token)})
	}
	var res []leaseapi.RenewResult
	if br, ok := r.b.(leaseapi.BatchRenewer); ok {
		res = br.RenewBatch(ctx, reqs)
	} else {
		for _, q := range reqs {
			rec, err := r.b.Renew(ctx, q.Record, q.TTL)
			res = append(res, leaseapi.RenewResult{Record: rec, Err: err})
		}
	}
	for j := range reqs {
		r.log.end(ids[j], res[j].Record, res[j].Err)
	}
	return res
}

// installAudit installs the PostgreSQL audit trigger in the env's schema.
func (e *realEnv) installAudit(ctx context.Context, pool *pgxpool.Pool) {
	if err := serveraudit.Install(ctx, pool, e.schema, postgres.DefaultTable); err != nil {
		e.t.Fatalf("audit: %v", err)
	}
}

// readAudit reads what the server committed to the env's keys. ok is
// false, with the reason logged, when this server keeps no audit (a Valkey
// server without the append-only file).
func (e *realEnv) readAudit() (l *serveraudit.Log, ok bool) {
	t := e.t
	switch e.kind {
	case "valkey":
		l, err := serveraudit.ReadAOF(e.vk.AppendOnlyDir(), e.prefix)
		if errors.Is(err, serveraudit.ErrNoAOF) {
			t.Logf("audit unavailable, its checks skipped: %v", err)
			return nil, false
		}
		if err != nil {
			t.Errorf("audit: %v", err)
			return nil, false
		}
		return l, true
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.New(ctx, e.pg.URL())
		if err != nil {
			t.Errorf("audit: pool: %v", err)
			return nil, false
		}
		defer pool.Close()
		var l *serveraudit.Log
		if err := eventually(5*time.Second, func() error {
			var err error
			l, err = serveraudit.ReadPostgres(ctx, pool, e.schema)
			return err
		}); err != nil {
			t.Errorf("audit: %v", err)
			return nil, false
		}
		return l, true
	}
}

// auditResult is what one repetition's audit showed.
type auditResult struct {
	records, calls                     int
	committed, notCommitted, undecided int
	// lost are the "missing-success" violations: acknowledged calls the
	// server's log does not hold (allowed only where a crash loses
	// writes).
	lost []serveraudit.Violation
}

// checkAudit runs C1 on the server's log and C4 of every recorded call
// against it, logs how each ambiguous call was settled, and fails the
// test on any violation (except "missing-success" when lossy: a crash
// that loses acknowledged writes loses their audit records with them;
// those are returned). On failure it writes the audit, the calls and the
// history next to each other.
func (e *realEnv) checkAudit(lossy bool) (auditResult, bool) {
	t := e.t
	l, ok := e.readAudit()
	if !ok {
		return auditResult{}, false
	}
	rep := serveraudit.Match(l, e.calls.snapshot())
	res := auditResult{records: len(l.Records), calls: len(rep.Calls), committed: rep.Committed, notCommitted: rep.NotCommitted, undecided: rep.Undecided}
	var bad []serveraudit.Violation
	for _, v := range l.Check() {
		bad = append(bad, serveraudit.Violation{Rule: "C1 " + v.Rule, Detail: v.Detail, Seqs: v.Seqs})
	}
	for _, v := range rep.Violations {
		if lossy && v.Rule == "missing-success" {
			res.lost = append(res.lost, v)
			continue
		}
		bad = append(bad, serveraudit.Violation{Rule: "C4 " + v.Rule, Detail: v.Detail, Seqs: v.Seqs})
	}
	t.Logf("audit: %d records (%d grants), %d calls; ambiguous: %d committed, %d not committed, %d undecided; %d acknowledged calls lost",
		res.records, l.Count(serveraudit.Grant), res.calls, res.committed, res.notCommitted, res.undecided, len(res.lost))
	if len(bad) > 0 {
		t.Errorf("audit: %d violations, first: %v", len(bad), bad[0])
		for _, v := range bad[1:min(len(bad), 10)] {
			t.Logf("  %v", v)
		}
		e.writeAudit(l, rep)
		e.writeHistory()
	}
	return res, true
}

// writeAudit writes the server's log and the matched calls as JSON.
func (e *realEnv) writeAudit(l *serveraudit.Log, rep serveraudit.Report) {
	dir := e.t.TempDir()
	if d := getenv(envArtifacts); d != "" {
		dir = d
	}
	base := fmt.Sprintf("%s/%s", dir, sanitize(e.t.Name()))
	if err := writeJSONFile(base+"-audit.json", l.WriteJSON); err != nil {
		e.t.Logf("audit artifact: %v", err)
	}
	if err := writeJSONFile(base+"-calls.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}); err != nil {
		e.t.Logf("calls artifact: %v", err)
	}
	e.t.Logf("audit written to %s-audit.json and -calls.json", base)
}
