package runtime

import (
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// This file holds the Client's exact metrics: counters and fixed-bucket
// histograms kept in atomics on one per-client struct, incremented where
// the work happens (never derived from the best-effort events), and the
// snapshot that exporters read. Recording allocates nothing and takes no
// lock.

// MetricsReader is what exporters poll: a [Client] is one.
type MetricsReader interface {
	// Metrics returns a snapshot of the counters; it never blocks on a
	// lease and is safe for concurrent use.
	Metrics() Metrics
}

// durationBounds are the upper bounds (inclusive) of the histogram
// buckets, from in-process calls (microseconds) to long acquisition waits.
var durationBounds = [...]time.Duration{
	5 * time.Microsecond, 10 * time.Microsecond, 25 * time.Microsecond, 50 * time.Microsecond,
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute,
}

// HistogramBuckets is the number of buckets of every [Histogram]: one per
// bound of [HistogramBounds] and one above the last.
const HistogramBuckets = len(durationBounds) + 1

// HistogramBounds returns the upper bounds of the histogram buckets, the
// same for every histogram of every Client (a fresh copy).
func HistogramBounds() []time.Duration {
	out := make([]time.Duration, len(durationBounds))
	copy(out, durationBounds[:])
	return out
}

// Histogram is a snapshot of durations counted into fixed buckets:
// Counts[i] counts durations d with HistogramBounds()[i-1] < d <=
// HistogramBounds()[i] (the last bucket: above every bound). Sum is the
// total of the durations. A snapshot taken while operations complete may
// see a bucket count and Sum of slightly different instants; each is exact
// at its own.
type Histogram struct {
	Counts [HistogramBuckets]uint64
	Sum    time.Duration
}

// Count returns the number of durations counted.
func (h Histogram) Count() uint64 {
	var n uint64
	for _, c := range h.Counts {
		n += c
	}
	return n
}

// LossCause is why a lease ended without being released.
type LossCause uint8

// Loss causes. A lease that expired while Uncertain is counted by the
// failure that made it Uncertain (unavailable or ambiguous); one that
// expired from Active, by LossExpired.
const (
	// LossExpired: the deadline passed with no failed operation pending
	// (an unmanaged lease not renewed in time, a grant that arrived late).
	LossExpired LossCause = iota + 1
	// LossStale: the backend proved another grant replaced this one.
	LossStale
	// LossRegression: a renewal changed the grant's token or owner.
	LossRegression
	// LossUnavailable: renewals failed with the backend unavailable
	// until the deadline.
	LossUnavailable
	// LossAmbiguous: renewals had no reliable outcome until the deadline.
	LossAmbiguous
	// LossClosed: the client closed and could not release the lease.
	LossClosed
)

// lossCauses lists every cause in the order of the counters.
var lossCauses = [...]LossCause{LossExpired, LossStale, LossRegression, LossUnavailable, LossAmbiguous, LossClosed}

// String returns the cause's lower-case name, used as a metric label.
func (c LossCause) String() string {
	switch c {
	case LossExpired:
		return "expired"
	case LossStale:
		return "stale"
	case LossRegression:
		return "regression"
	case LossUnavailable:
		return "unavailable"
	case LossAmbiguous:
		return "ambiguous"
	case LossClosed:
		return "closed"
	}
	return "unknown"
}

// kinds lists the outcome of every counter, in order: success (nil) and
// each sentinel. Counters are indexed by position in this list, so they do
// not depend on how leaseapi represents an Outcome.
var kinds = [...]error{
	nil, leaseapi.ErrContended, leaseapi.ErrTimeout, leaseapi.ErrCanceled,
	leaseapi.ErrLost, leaseapi.ErrStaleOwner, leaseapi.ErrBackendUnavailable,
	leaseapi.ErrInvalidState, leaseapi.ErrAmbiguousOutcome, leaseapi.ErrCapacity,
	leaseapi.ErrFencingRegression,
}

const nKinds = len(kinds)

// kindIndex returns the position in kinds of the sentinel err matches;
// small enough to inline, so that a success costs one comparison.
func kindIndex(err error) int {
	if err == nil {
		return 0
	}
	return failureIndex(err)
}

// failureIndex is kindIndex for a non-nil error.
func failureIndex(err error) int {
	k := leaseapi.Kind(err)
	for i := 1; i < nKinds; i++ {
		if k == kinds[i] {
			return i
		}
	}
	return 6 // what leaseapi.OutcomeOf reports for an unclassified error: unavailable
}

// Backend calls that have latency histograms, in order: one per
// operation (the first nOps), and callDiscard, the release of a grant the
// client will not use, which is reported as a release but is not one of
// a handle's (Metrics.Releases). Keeping it apart lets the snapshot derive
// Renewals and Releases from the call histograms instead of counting each
// renewal and release twice.
const (
	callAcquire = iota
	callRenew
	callValidate
	callRelease
	callInspect
	nOps
	callDiscard = nOps
	nCalls      = nOps + 1
)

// callOps maps a call index to its operation label.
var callOps = [nCalls]leaseapi.Operation{
	callAcquire:  leaseapi.OperationAcquire,
	callRenew:    leaseapi.OperationRenew,
	callValidate: leaseapi.OperationValidate,
	callRelease:  leaseapi.OperationRelease,
	callInspect:  leaseapi.OperationInspect,
	callDiscard:  leaseapi.OperationRelease,
}

// states lists the handle states in the order of the transition counters.
var states = [...]leaseapi.State{
	leaseapi.StateActive, leaseapi.StateUncertain, leaseapi.StateExpired,
	leaseapi.StateLost, leaseapi.StateReleased,
}

const nStates = len(states)

// stateSlots[s] is 1 + the position of s in states, 0 for a value that is
// not a state: one load per lookup.
var stateSlots = func() (t [256]uint8) {
	for i, s := range states {
		t[s] = uint8(i + 1)
	}
	return t
}()

func stateIndex(s leaseapi.State) (int, bool) {
	i := int(stateSlots[s]) - 1
	return i, i >= 0
}

// counter is a uint64 alone on its cache line, so that counters bumped by
// different operations on different cores do not contend.
type counter struct {
	n atomic.Uint64
	_ [56]byte
}

func (c *counter) add() { c.n.Add(1) }

// histogram is the recording side of [Histogram]; its sum leads on its
// own cache line.
type histogram struct {
	sum    atomic.Int64 // nanoseconds
	_      [56]byte
	counts [HistogramBuckets]atomic.Uint64
}

func (h *histogram) observe(d time.Duration) {
	h.counts[bucketOf(d)].Add(1)
	h.sum.Add(int64(d))
}

// bucketStart[n] is the first bucket a duration of bit length n can fall
// in: the first whose bound is at least 1<<(n-1). Successive bounds grow
// by a factor of at least 2 (TestBucketOfMatchesBounds), so a bit length's
// range [1<<(n-1), 1<<n) holds at most one bound, and bucketOf needs at
// most one comparison after the lookup, where a search over the bounds
// took five.
var bucketStart = func() (t [65]uint8) {
	for n := 1; n < len(t); n++ {
		low := time.Duration(uint64(1) << (n - 1))
		i := 0
		for i < len(durationBounds) && durationBounds[i] < low {
			i++
		}
		t[n] = uint8(i)
	}
	return t
}()

// bucketOf returns the index of the bucket that counts d.
func bucketOf(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	i := int(bucketStart[bits.Len64(uint64(d))])
	if i < len(durationBounds) && d > durationBounds[i] {
		i++
	}
	return i
}

// add adds o's counts and sum to h.
func (h *Histogram) add(o Histogram) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.Sum += o.Sum
}

func (h *histogram) snapshot() Histogram {
	var s Histogram
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
	}
	s.Sum = time.Duration(h.sum.Load())
	return s
}

// clientMetrics is a Client's recording side. A nil *clientMetrics (metrics
// off) records nothing: every method checks.
type clientMetrics struct {
	acquire [nKinds]histogram
	// grants counts each successful acquisition that was one successful
	// acquire call of the same duration (a TryAcquire, or an Acquire
	// granted at its first attempt, whose reply was the grant): the
	// snapshot adds it to both acquire[ok] and calls[callAcquire][ok],
	// so the common acquisition is one observation, not two.
	grants       histogram
	calls        [nCalls][nKinds]histogram
	losses       [len(lossCauses)]counter
	transitions  [nStates][nStates]counter
	eventDropped counter
	since        time.Time // when counting started: the client's creation
}

// acquisition is one Acquire/TryAcquire call's timing, from its attempts
// to observedAcquire: the first attempt's send instant (zero if none was
// sent), and the latency of its last successful acquire call, which is
// held back (pending) until the acquisition ends, to be counted with it.
type acquisition struct {
	first   time.Time
	okCall  time.Duration
	pending bool
}

// called records one acquire call of the acquisition; a success waits in
// a for the acquisition's end (acquired), when it is counted.
func (a *acquisition) called(m *clientMetrics, d time.Duration, err error) {
	if m == nil {
		return
	}
	a.flush(m)
	if err == nil {
		a.okCall, a.pending = d, true
		return
	}
	m.called(callAcquire, d, err)
}

// flush counts the acquire call a holds back, if any.
func (a *acquisition) flush(m *clientMetrics) {
	if a.pending {
		a.pending = false
		m.called(callAcquire, a.okCall, nil)
	}
}

// acquired records one Acquire/TryAcquire call of duration d, waits
// included, and the acquire call a holds back: a success of the same
// duration as that call is one observation of grants.
func (m *clientMetrics) acquired(a *acquisition, d time.Duration, err error) {
	if m == nil {
		return
	}
	if err == nil && a.pending && a.okCall == d {
		a.pending = false
		m.grants.observe(d)
		return
	}
	a.flush(m)
	m.acquire[kindIndex(err)].observe(d)
}

// called records one backend call of operation op (a call* index).
func (m *clientMetrics) called(op int, d time.Duration, err error) {
	if m == nil {
		return
	}
	m.calls[op][kindIndex(err)].observe(d)
}

// transitioned records one state change and, for a loss, its cause.
func (m *clientMetrics) transitioned(from, to leaseapi.State, cause LossCause) {
	if m == nil {
		return
	}
	if f, ok := stateIndex(from); ok {
		if t, ok := stateIndex(to); ok {
			m.transitions[f][t].add()
		}
	}
	if cause != 0 {
		m.losses[cause-1].add()
	}
}

// dropped records one state-change event not delivered.
func (m *clientMetrics) dropped() {
	if m == nil {
		return
	}
	m.eventDropped.add()
}

// Metrics is a snapshot of one Client's exact metrics (see
// [Client.Metrics]). Each counter is exact: it counts every operation of
// its kind the Client completed before the snapshot read it. Series whose
// count is zero are left out of the slices, which are in a fixed order.
type Metrics struct {
	// Acquisitions: every Acquire and TryAcquire call (Run's too), by
	// outcome, with its duration including waits and retries: from the
	// send of its first request to the receipt of the grant (or to the
	// failure); zero for a call that failed before sending anything (bad
	// input, capacity, a closed client).
	Acquisitions []OutcomeHistogram
	// BackendCalls: every call the Client and its supervisors made to the
	// backend, by operation and outcome, with its latency as the caller
	// saw it (a batched renewal includes its wait for the batch). A
	// successful acquire call is counted when its Acquire or TryAcquire
	// returns, with the acquisition.
	BackendCalls []CallHistogram
	// Renewals: every renewal a handle sent to the backend (Renew and
	// managed renewal), by outcome.
	Renewals []OutcomeCount
	// Releases: every release a handle sent to the backend (Release, and
	// Close for the leases still held), by outcome. A Release answered
	// without I/O (already released, or Lost) is not counted.
	Releases []OutcomeCount
	// Losses: every lease that ended Expired or Lost, by cause.
	Losses []LossCount
	// StateChanges: every handle transition, by from and to state.
	StateChanges []TransitionCount
	// StateChangesDropped counts state-change events not delivered to
	// ClientOptions.OnStateChange (its queue was full, or it panicked).
	StateChangesDropped uint64
	// Since is when the counters started (the client's creation, on its
	// clock); zero with metrics off. Counters are cumulative from it.
	Since time.Time
	// Held: leases with a live supervisor; Managed: handles under managed
	// renewal; Waiting: Acquire/TryAcquire calls in flight. Gauges, read
	// at the snapshot.
	Held, Managed, Waiting int64
}

// OutcomeHistogram is a [Histogram] of operations with one outcome.
type OutcomeHistogram struct {
	Outcome leaseapi.Outcome
	Histogram
}

// CallHistogram is a [Histogram] of backend calls of one operation with
// one outcome.
type CallHistogram struct {
	Operation leaseapi.Operation
	Outcome   leaseapi.Outcome
	Histogram
}

// OutcomeCount counts operations with one outcome.
type OutcomeCount struct {
	Outcome leaseapi.Outcome
	N       uint64
}

// LossCount counts losses with one cause.
type LossCount struct {
	Cause LossCause
	N     uint64
}

// TransitionCount counts handle transitions from one state to another.
type TransitionCount struct {
	From, To leaseapi.State
	N        uint64
}

// Acquisition returns the histogram of acquisitions with outcome o (zero
// if none).
func (m Metrics) Acquisition(o leaseapi.Outcome) Histogram {
	for _, h := range m.Acquisitions {
		if h.Outcome == o {
			return h.Histogram
		}
	}
	return Histogram{}
}

// BackendCall returns the histogram of backend calls of operation op with
// outcome o (zero if none).
func (m Metrics) BackendCall(op leaseapi.Operation, o leaseapi.Outcome) Histogram {
	for _, h := range m.BackendCalls {
		if h.Operation == op && h.Outcome == o {
			return h.Histogram
		}
	}
	return Histogram{}
}

// Renewal returns how many renewals had outcome o.
func (m Metrics) Renewal(o leaseapi.Outcome) uint64 { return countOf(m.Renewals, o) }

// Release returns how many releases had outcome o.
func (m Metrics) Release(o leaseapi.Outcome) uint64 { return countOf(m.Releases, o) }

// Loss returns how many leases were lost for cause c.
func (m Metrics) Loss(c LossCause) uint64 {
	for _, l := range m.Losses {
		if l.Cause == c {
			return l.N
		}
	}
	return 0
}

// StateChange returns how many handles went from one state to another.
func (m Metrics) StateChange(from, to leaseapi.State) uint64 {
	for _, t := range m.StateChanges {
		if t.From == from && t.To == to {
			return t.N
		}
	}
	return 0
}

func countOf(cs []OutcomeCount, o leaseapi.Outcome) uint64 {
	for _, c := range cs {
		if c.Outcome == o {
			return c.N
		}
	}
	return 0
}

// outcomeAt returns the Outcome of the counters at position i.
func outcomeAt(i int) leaseapi.Outcome { return leaseapi.OutcomeOf(kinds[i]) }

// snapshot reads every counter once.
func (m *clientMetrics) snapshot() Metrics {
	var out Metrics
	if m == nil {
		return out
	}
	grants := m.grants.snapshot()
	for i := range m.acquire {
		h := m.acquire[i].snapshot()
		if i == 0 {
			h.add(grants)
		}
		if h.Count() > 0 {
			out.Acquisitions = append(out.Acquisitions, OutcomeHistogram{Outcome: outcomeAt(i), Histogram: h})
		}
	}
	var renewals, releases [nKinds]uint64
	for op := range nOps {
		for i := range m.calls[op] {
			h := m.calls[op][i].snapshot()
			switch op {
			case callAcquire:
				if i == 0 {
					h.add(grants)
				}
			case callRenew: // every renewal is one call (supervisorCall)
				renewals[i] = h.Count()
			case callRelease: // so is every release; callDiscard is not one
				releases[i] = h.Count()
				h.add(m.calls[callDiscard][i].snapshot())
			}
			if h.Count() > 0 {
				out.BackendCalls = append(out.BackendCalls, CallHistogram{Operation: callOps[op], Outcome: outcomeAt(i), Histogram: h})
			}
		}
	}
	out.Renewals = counts(&renewals)
	out.Releases = counts(&releases)
	for i, c := range lossCauses {
		if n := m.losses[i].n.Load(); n > 0 {
			out.Losses = append(out.Losses, LossCount{Cause: c, N: n})
		}
	}
	for f := range m.transitions {
		for t := range m.transitions[f] {
			if n := m.transitions[f][t].n.Load(); n > 0 {
				out.StateChanges = append(out.StateChanges, TransitionCount{From: states[f], To: states[t], N: n})
			}
		}
	}
	out.StateChangesDropped = m.eventDropped.n.Load()
	out.Since = m.since
	return out
}

func counts(cs *[nKinds]uint64) []OutcomeCount {
	var out []OutcomeCount
	for i, n := range cs {
		if n > 0 {
			out = append(out, OutcomeCount{Outcome: outcomeAt(i), N: n})
		}
	}
	return out
}

// lossCause classifies a transition into a terminal state other than
// Released: cause is the sentinel of the transition, pending the sentinel
// that made the handle Uncertain before it (nil if it was Active). It
// returns 0 for any other transition.
func lossCause(to leaseapi.State, cause, pending error) LossCause {
	switch to {
	case leaseapi.StateLost:
		switch leaseapi.Kind(cause) {
		case leaseapi.ErrStaleOwner:
			return LossStale
		case leaseapi.ErrFencingRegression:
			return LossRegression
		}
		return LossClosed
	case leaseapi.StateExpired:
		switch leaseapi.Kind(pending) {
		case leaseapi.ErrBackendUnavailable:
			return LossUnavailable
		case leaseapi.ErrAmbiguousOutcome:
			return LossAmbiguous
		case leaseapi.ErrStaleOwner:
			return LossStale
		}
		return LossExpired
	}
	return 0
}

// initTelemetry sets up metrics, tracing and the state-change queue from
// o and sets the supervisors' hooks in cfg.
//
// Where each figure comes from, with what it costs on the hot path: the
// client's own backend calls (acquire attempts, the inspection that
// resolves a lost reply, the release of a grant it will not use) are timed
// in acquire.go, the acquisition attempt from the clock readings it takes
// anyway (its send instant, and the reply's arrival, which is also the
// grant's receive instant); the supervisors' calls and transitions come
// from their hooks (OnCall, OnStateChange) with the readings the actor
// takes anyway. An acquisition's duration runs from its first attempt's
// send instant to the grant's receive instant (a failure reads the clock
// once more), so a successful acquisition takes no reading of its own. No wrapper sits beneath a backend call: any frame
// added there pushed the supervisor's in-process call chain past the
// minimum goroutine stack once, and each clock reading costs as much as
// all the counters of a pair (BenchmarkPairMetricsOn/Off).
func (c *Client) initTelemetry(o ClientOptions, cfg *supervisor.Config) error {
	c.hasher = o.KeyHasher
	if c.hasher == nil && (o.Tracer != nil || o.OnStateChange != nil) {
		h, err := randomKeyHasher()
		if err != nil {
			return err
		}
		c.hasher = h
	}
	c.tracer = o.Tracer
	if !o.NoMetrics {
		c.m = &clientMetrics{since: c.clk.Now()}
	}
	if o.OnStateChange != nil {
		c.events = newStateQueue(o.OnStateChange, c.hasher, c.m)
	}
	if c.m != nil || c.events != nil {
		cfg.OnStateChange = c.stateChanged
	}
	if c.m == nil {
		return nil
	}
	cfg.OnCall = c.supervisorCall
	return nil
}

// supervisorCall counts one backend call of a supervisor (OnCall hook).
func (c *Client) supervisorCall(call supervisor.Call) {
	d := call.Done.Sub(call.SentAt)
	var op int
	switch call.Kind {
	case supervisor.CallRenew:
		op = callRenew // the call is the renewal: Metrics.Renewals derives from it
	case supervisor.CallValidate:
		op = callValidate
	case supervisor.CallRelease:
		op = callRelease // the call is the release: so do Metrics.Releases
	default:
		return
	}
	c.m.called(op, d, call.Err)
}

// Metrics returns a snapshot of the client's exact metrics (see
// [Metrics]); with ClientOptions.NoMetrics only the gauges are filled in.
// It never blocks on a lease; it is safe for concurrent use, also after
// Close. A zero or nil Client reports zero metrics.
func (c *Client) Metrics() Metrics {
	if !c.usable() {
		return Metrics{}
	}
	m := c.m.snapshot()
	m.Held = int64(c.Held())
	m.Managed = c.managed.n.Load()
	m.Waiting = c.waiters.Load()
	return m
}
