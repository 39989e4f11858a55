package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
	"github.com/leasekit/lease/simtest"
)

var leaderKey = leaseapi.MustKey("svc", "leader")

// term is one leadership term of one candidate, in true (simulated) time.
type term struct {
	who        string
	token      leaseapi.Token
	start, end time.Time
	cause      error
}

// terms records every candidate's terms.
type terms struct {
	mu   sync.Mutex
	list []*term
	errs []error
}

func (ts *terms) begin(who string, token leaseapi.Token) *term {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tm := &term{who: who, token: token, start: time.Now()}
	ts.list = append(ts.list, tm)
	return tm
}

func (ts *terms) finish(tm *term, cause error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	tm.end, tm.cause = time.Now(), cause
}

func (ts *terms) all() []term {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]term, len(ts.list))
	for i, tm := range ts.list {
		out[i] = *tm
	}
	return out
}

func (ts *terms) onError(err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.errs = append(ts.errs, err)
}

// candidate is one simulated server running a Singleton.
type candidate struct {
	name    string
	faulty  *simtest.Faulty
	client  *runtime.Client
	single  *service.Singleton
	started int
	stopped int
	mu      sync.Mutex
}

func (c *candidate) counts() (started, stopped int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started, c.stopped
}

// newCandidate builds a candidate on store whose Run records its term in
// ts and, every second while its lease is Active, an admission and a
// fenced write in hist/res. The client is closed at cleanup.
func newCandidate(t *testing.T, store *memory.Store, name string, p leaseapi.Policy, ts *terms, hist *simtest.History, res *simtest.Resource) *candidate {
	t.Helper()
	c := &candidate{name: name}
	c.client, c.faulty = backendtest.FaultyClient(t, store, runtime.ClientOptions{})
	// Every call takes 1ms: a hand-off then takes time, so an admission
	// just before a release never shares its instant with the next grant
	// (the history checker counts equal instants as an overlap).
	c.faulty.SetDelay(time.Millisecond)
	var err error
	c.single, err = service.New(c.client, service.Options{
		Key: leaderKey, Policy: p,
		OnStartedLeading: func(leaseapi.Token) { c.mu.Lock(); c.started++; c.mu.Unlock() },
		OnStoppedLeading: func() { c.mu.Lock(); c.stopped++; c.mu.Unlock() },
		OnError:          ts.onError,
		Run: func(ctx context.Context, h *runtime.Handle) error {
			tm := ts.begin(name, h.Token())
			hist.Grant(h.Key(), h.Owner(), h.Token(), time.Now())
			defer func() { ts.finish(tm, context.Cause(ctx)) }()
			for {
				if h.State() == leaseapi.StateActive {
					now := time.Now()
					hist.Admit(h.Key(), h.Owner(), h.Token(), now)
					_ = res.Write(h.Owner(), h.Token(), name, now)
				}
				tk := time.NewTimer(time.Second)
				select {
				case <-tk.C:
				case <-ctx.Done():
					tk.Stop()
					return nil
				}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fleetParts returns what the candidates of a fleet share: a store, a
// history of admissions and fenced writes with its resource, a record of
// terms, and the election policy.
func fleetParts(t *testing.T) (*memory.Store, *simtest.History, *simtest.Resource, *terms, leaseapi.Policy) {
	hist := simtest.NewHistory()
	return backendtest.MemoryStore(t), hist, simtest.NewResource("svc", hist), &terms{}, electionPolicy(t)
}

// electionPolicy: TTL 10s, margin 2s, renew every 3s, retry 1s, wait 30s.
func electionPolicy(t *testing.T) leaseapi.Policy {
	return backendtest.Policy(t, leaseapi.PolicyOptions{TTL: 10 * time.Second, SafetyMargin: 2 * time.Second, RenewEvery: 3 * time.Second, Retry: time.Second, Wait: 30 * time.Second, OperationTimeout: time.Second})
}

// leaders returns the candidates that lead now.
func leaders(cs []*candidate) []*candidate {
	var out []*candidate
	for _, c := range cs {
		if _, ok := c.single.Leading(); ok {
			out = append(out, c)
		}
	}
	return out
}

// checkTerms fails if two terms overlap in time or tokens do not increase.
func checkTerms(t *testing.T, ts []term) {
	t.Helper()
	for i := 1; i < len(ts); i++ {
		prev, cur := ts[i-1], ts[i]
		if prev.end.IsZero() || prev.end.After(cur.start) {
			t.Errorf("terms overlap: %s token %d [%v, %v] and %s token %d from %v", prev.who, prev.token, prev.start, prev.end, cur.who, cur.token, cur.start)
		}
		if cur.token <= prev.token {
			t.Errorf("term tokens not increasing: %d then %d", prev.token, cur.token)
		}
	}
}
