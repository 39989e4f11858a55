package runtime_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
	"github.com/leasekit/lease/simtest"
)

func TestManagedRenewalKeepsLeaseForHours(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "managed"), p)
		m, err := h.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for range 3 * 3600 / 5 { // three hours in 5s steps
			simtest.Advance(5 * time.Second)
			if h.State() != leaseapi.StateActive {
				t.Fatalf("managed lease at %v: state %v", time.Now(), h.State())
			}
		}
		// One renewal per RenewEvery (3s), measured from each send.
		if got, want := b.faulty.Calls(leaseapi.OperationRenew), 3*3600/3; got < want-1 || got > want+1 {
			t.Fatalf("renewals in 3h: got %d, want about %d", got, want)
		}
		if err := m.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := <-m.Loss(); ok {
			t.Fatal("Stop delivered a Loss")
		}
		// Stop never releases.
		if _, err := b.client.TryAcquire(t.Context(), testKey(t, "managed"), p); !errors.Is(err, leaseapi.ErrContended) {
			t.Fatalf("TryAcquire after Stop: got %v, want ErrContended (Stop must not release)", err)
		}
		if err := m.Stop(t.Context()); err != nil {
			t.Fatalf("second Stop: got %v, want nil", err)
		}
		_, err = h.StartManaged(t.Context())
		wantKind(t, "StartManaged after Stop", err, leaseapi.ErrInvalidState)
	})
}

func TestManagedLossDeliveredOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     func(f *simtest.Faulty)
		wantState leaseapi.State
		wantErr   error
	}{
		{"renewals keep failing", func(f *simtest.Faulty) { f.SetMode(simtest.Down) }, leaseapi.StateExpired, leaseapi.ErrLost},
		{"renewal replies lost", func(f *simtest.Faulty) { f.SetMode(simtest.LoseReplies) }, leaseapi.StateExpired, leaseapi.ErrLost},
		{"backend blackholed", func(f *simtest.Faulty) { f.SetMode(simtest.Blackhole) }, leaseapi.StateExpired, leaseapi.ErrLost},
		{"stale owner", func(f *simtest.Faulty) { f.Inject(leaseapi.OperationRenew, simtest.Stale) }, leaseapi.StateLost, leaseapi.ErrStaleOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := setup(t, runtimeOpts())
				p := basicPolicy(t)
				h := mustAcquire(t, b.client, testKey(t, "loss"), p)
				m, err := h.StartManaged(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				deadline := h.Deadline()
				tc.fault(b.faulty)
				simtest.Advance(p.TTL())
				l, ok := <-m.Loss()
				if !ok {
					t.Fatal("no Loss delivered")
				}
				if l.State != tc.wantState || leaseapi.Kind(l.Err) != tc.wantErr {
					t.Fatalf("Loss: got (%v, %v), want (%v, %v)", l.State, l.Err, tc.wantState, tc.wantErr)
				}
				if tc.wantState == leaseapi.StateExpired && l.At.After(deadline.Add(time.Nanosecond)) {
					t.Fatalf("Loss at %v, after the deadline %v", l.At, deadline)
				}
				if _, ok := <-m.Loss(); ok {
					t.Fatal("a second Loss was delivered")
				}
				if b.client.Managed() != 0 {
					t.Fatalf("managed count after loss: got %d, want 0", b.client.Managed())
				}
			})
		})
	}
}

func TestManagedReleaseClosesLossWithoutValue(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		h := mustAcquire(t, b.client, testKey(t, "release-managed"), basicPolicy(t))
		m, err := h.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, ok := <-m.Loss(); ok {
			t.Fatal("Release delivered a Loss")
		}
	})
}

func TestManagedRecoversFromTransientFailure(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "transient"), p)
		m, err := h.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.faulty.Inject(leaseapi.OperationRenew, simtest.LoseReply, simtest.FailBeforeSend)
		simtest.Advance(3 * time.Second) // first renewal: reply lost
		wantState(t, "after a lost renewal reply", h, leaseapi.StateUncertain)
		simtest.Advance(time.Second) // retry after Retry: fails before send
		wantState(t, "after a failed retry", h, leaseapi.StateUncertain)
		simtest.Advance(time.Second) // retry succeeds
		wantState(t, "after a successful retry", h, leaseapi.StateActive)
		simtest.Advance(time.Minute)
		wantState(t, "a minute later", h, leaseapi.StateActive)
		select {
		case l := <-m.Loss():
			t.Fatalf("unexpected Loss %+v", l)
		default:
		}
	})
}

func TestCapacity(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtime.ClientOptions{MaxManaged: 2, MaxWaiters: 1})
		p := basicPolicy(t)
		var ms []*runtime.Managed
		for i := range 2 {
			h := mustAcquire(t, b.client, testKey(t, "cap-"+string(rune('a'+i))), p)
			m, err := h.StartManaged(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		h := mustAcquire(t, b.client, testKey(t, "cap-c"), p)
		_, err := h.StartManaged(t.Context())
		wantKind(t, "StartManaged over MaxManaged", err, leaseapi.ErrCapacity)
		if err := ms[0].Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if _, err := h.StartManaged(t.Context()); err != nil {
			t.Fatalf("StartManaged after a slot freed: %v", err)
		}

		// MaxWaiters 1: a second acquisition while one is in flight fails fast.
		b.faulty.SetMode(simtest.Blackhole)
		errc := make(chan error, 1)
		go func() {
			_, err := b.client.TryAcquire(context.Background(), testKey(t, "cap-wait"), p)
			errc <- err
		}()
		simtest.Settle()
		_, err = b.client.TryAcquire(t.Context(), testKey(t, "cap-wait-2"), p)
		wantKind(t, "TryAcquire over MaxWaiters", err, leaseapi.ErrCapacity)
		simtest.Advance(p.OperationTimeout())
		wantKind(t, "blackholed TryAcquire", <-errc, leaseapi.ErrAmbiguousOutcome)
		b.faulty.SetMode(simtest.Pass)
	})
}

// TestManagedEndsAtFailedRelease: a Release ends managed renewal even when
// it fails. The Loss channel closes without a value, the managed slot is
// given back, nothing renews the lease again, and the handle expires at
// its deadline; a key whose release was not applied is free again one TTL
// after the last renewal, not held until the client closes (the nemesis
// soak on Valkey found a lease renewed for good after its release timed
// out).
func TestManagedEndsAtFailedRelease(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault simtest.Fault
		kind  error
	}{
		{"release not sent", simtest.FailBeforeSend, leaseapi.ErrBackendUnavailable},
		{"release applied, reply lost", simtest.LoseReply, leaseapi.ErrAmbiguousOutcome},
		{"release hangs", simtest.Hang, leaseapi.ErrAmbiguousOutcome},
	} {
		t.Run(tc.name, func(t *testing.T) {
			simtest.Simulate(t, func(t *testing.T) {
				b := setup(t, runtimeOpts())
				p := basicPolicy(t)
				k := testKey(t, "failed-release")
				h := mustAcquire(t, b.client, k, p)
				m, err := h.StartManaged(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				simtest.Advance(p.RenewEvery()) // one renewal
				deadline := h.Deadline()
				b.faulty.Inject(leaseapi.OperationRelease, tc.fault)
				wantKind(t, "Release", h.Release(t.Context()), tc.kind)
				if st := h.State(); st != leaseapi.StateUncertain {
					t.Fatalf("after the failed release: state %v, want Uncertain", st)
				}
				select {
				case _, ok := <-m.Loss():
					if ok {
						t.Fatal("the failed release delivered a Loss")
					}
				default:
					t.Fatal("Loss channel still open after the release: managed renewal goes on")
				}
				if b.client.Managed() != 0 {
					t.Fatalf("managed count after Release: got %d, want 0", b.client.Managed())
				}
				renewals := b.faulty.Calls(leaseapi.OperationRenew)
				simtest.Advance(3 * p.TTL())
				if got := b.faulty.Calls(leaseapi.OperationRenew); got != renewals {
					t.Fatalf("%d renewals after the failed release, want none", got-renewals)
				}
				if st := h.State(); st != leaseapi.StateExpired {
					t.Fatalf("3 TTLs after the failed release: state %v, want Expired", st)
				}
				if h.Deadline() != deadline {
					t.Fatalf("deadline moved from %v to %v", deadline, h.Deadline())
				}
				// The key is free (released, or expired on the backend).
				h2, err := b.client.TryAcquire(t.Context(), k, p)
				if err != nil {
					t.Fatalf("TryAcquire 3 TTLs after the failed release: %v", err)
				}
				if h2.Token() <= h.Token() {
					t.Fatalf("new token %d not above the released one %d", h2.Token(), h.Token())
				}
			})
		})
	}
}

// TestStatusOneView: Status reads the managed flag from the same published
// view as the state and deadline, and the flag follows StartManaged, Stop
// and the end of the lease.
func TestStatusOneView(t *testing.T) {
	simtest.Simulate(t, func(t *testing.T) {
		b := setup(t, runtimeOpts())
		p := basicPolicy(t)
		h := mustAcquire(t, b.client, testKey(t, "status"), p)
		st := h.Status()
		if st.Managed || st.State != leaseapi.StateActive || !st.Deadline.Equal(h.Deadline()) || st.Record != h.Snapshot() || st.Err != nil {
			t.Fatalf("fresh handle: got %+v", st)
		}
		m, err := h.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st := h.Status(); !st.Managed || st.State != leaseapi.StateActive {
			t.Fatalf("after StartManaged: got managed %v state %v, want true active", st.Managed, st.State)
		}
		simtest.Advance(p.RenewEvery() + time.Millisecond)
		st = h.Status()
		if !st.Managed || !st.Record.AcquiredAt.After(h.AcquiredAt()) || st.Record != h.Snapshot() {
			t.Fatalf("after a managed renewal: got managed %v, record acquired %v (first grant %v)", st.Managed, st.Record.AcquiredAt, h.AcquiredAt())
		}
		if err := m.Stop(t.Context()); err != nil {
			t.Fatal(err)
		}
		if st := h.Status(); st.Managed || st.State != leaseapi.StateActive {
			t.Fatalf("after Stop: got managed %v state %v, want false active", st.Managed, st.State)
		}

		h2 := mustAcquire(t, b.client, testKey(t, "status-loss"), p)
		m2, err := h2.StartManaged(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b.faulty.Inject(leaseapi.OperationRenew, simtest.Stale)
		simtest.Advance(p.RenewEvery() + time.Millisecond)
		if _, ok := <-m2.Loss(); !ok {
			t.Fatal("no Loss delivered")
		}
		if st := h2.Status(); st.Managed || st.State != leaseapi.StateLost || leaseapi.Kind(st.Err) != leaseapi.ErrStaleOwner {
			t.Fatalf("after the loss: got managed %v state %v err %v, want false lost ErrStaleOwner", st.Managed, st.State, st.Err)
		}
	})
}
