package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/service"
	"github.com/leasekit/lease/simtest"
)

// TestRealBackendHandOff runs the hand-off scenario in real time on Valkey
// and PostgreSQL (each candidate with its own connection): after the
// leader crashes another leads within TTL + Retry (plus scheduling slack);
// after a clean Stop within one Retry (release notification: Valkey
// pub/sub, PostgreSQL LISTEN/NOTIFY). The slack is 300ms of round trips
// plus three times the worst timer lateness seen meanwhile (backendtest.LagProbe), so
// a loaded machine widens the bound by what it delays this process, and an
// idle one keeps it tight.
func TestRealBackendHandOff(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time scenario on real servers")
	}
	backendtest.ForEachReal(t, "svctest", realHandOff)
}

func realHandOff(t *testing.T, backend backendtest.NewBackend) {
	p := backendtest.Policy(t, leaseapi.PolicyOptions{TTL: time.Second, SafetyMargin: 200 * time.Millisecond, RenewEvery: 250 * time.Millisecond,
		Retry: 100 * time.Millisecond, Wait: 5 * time.Second, OperationTimeout: 300 * time.Millisecond})
	const slack = 300 * time.Millisecond // real round trips on an idle machine
	lag := backendtest.StartLagProbe(t)
	type cand struct {
		name   string
		faulty *simtest.Faulty
		single *service.Singleton
	}
	key := leaseapi.MustKey("svc", backendtest.RandomName("leader-"))
	started := make(chan *cand, 16)
	var cs []*cand
	for _, name := range []string{"a", "b", "c"} {
		c := &cand{name: name, faulty: simtest.NewFaulty(backend(t))}
		client, err := runtime.NewClient(c.faulty, runtime.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.faulty.SetMode(simtest.Pass)
			_ = client.Close(context.Background())
		})
		c.single, err = service.New(client, service.Options{Key: key, Policy: p,
			OnStartedLeading: func(leaseapi.Token) { started <- c },
			Run:              waitDone,
		})
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for _, c := range cs {
		if err := c.single.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for _, c := range cs {
			_ = c.single.Stop(context.Background())
		}
	}()
	next := func(within time.Duration) (*cand, time.Duration) {
		t.Helper()
		began := time.Now()
		for {
			bound := within + slack + 3*lag.Worst()
			tm := time.NewTimer(bound - time.Since(began))
			select {
			case c := <-started:
				tm.Stop()
				took := time.Since(began)
				if bound = within + slack + 3*lag.Worst(); took > bound {
					t.Fatalf("new leader after %v, want within %v", took, bound)
				}
				return c, took
			case <-tm.C:
				if time.Since(began) >= within+slack+3*lag.Worst() {
					t.Fatalf("no new leader within %v (timer lateness up to %v)", time.Since(began), lag.Worst())
					return nil, 0
				}
				// The bound grew meanwhile: wait for the rest.
			}
		}
	}
	first, _ := next(time.Second)
	_ = backendtest.Pause(t.Context(), 500*time.Millisecond)
	first.faulty.SetMode(simtest.Down)
	second, took := next(p.TTL() + p.Retry())
	if second == first {
		t.Fatal("the crashed leader led again")
	}
	t.Logf("take-over after a crash: %v", took.Round(time.Millisecond))
	_ = backendtest.Pause(t.Context(), 300*time.Millisecond)
	if err := second.single.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	third, took := next(p.Retry())
	if third == first || third == second {
		t.Fatalf("leader %s after the clean stop of %s", third.name, second.name)
	}
	t.Logf("take-over after a clean stop: %v", took.Round(time.Millisecond))
}
