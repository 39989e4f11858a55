package mailbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSendReceiveFIFO(t *testing.T) {
	m := New[int](3)
	for i := range 3 {
		if err := m.Send(t.Context(), i); err != nil {
			t.Fatalf("Send(%d): got %v, want nil", i, err)
		}
	}
	if err := m.TrySend(9); !errors.Is(err, ErrFull) {
		t.Fatalf("TrySend on a full mailbox: got %v, want ErrFull", err)
	}
	for i := range 3 {
		if got := <-m.Receive(); got != i {
			t.Fatalf("Receive: got %d, want %d", got, i)
		}
	}
}

func TestSendHonoursContextWhenFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[int](1)
		if err := m.Send(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		if err := m.Send(ctx, 2); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Send on a full mailbox with a deadline: got %v, want DeadlineExceeded", err)
		}
	})
}

func TestSendAfterCloseFails(t *testing.T) {
	m := New[int](4)
	m.Close()
	m.Close() // idempotent
	if err := m.Send(t.Context(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: got %v, want ErrClosed", err)
	}
	if err := m.TrySend(1); !errors.Is(err, ErrClosed) {
		t.Fatalf("TrySend after Close: got %v, want ErrClosed", err)
	}
}

func TestCloseUnblocksWaitingSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[int](1)
		_ = m.Send(t.Context(), 1)
		errc := make(chan error, 1)
		go func() { errc <- m.Send(context.Background(), 2) }()
		synctest.Wait() // the sender is durably blocked on the full mailbox
		m.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Send after Close: got %v, want ErrClosed", err)
		}
	})
}

// TestConcurrentSendersRaceClose runs many senders against Close under the
// race detector: no panic, every Send returns nil or ErrClosed, and every
// message accepted before Close was receivable by the actor or the drain.
func TestConcurrentSendersRaceClose(t *testing.T) {
	for range 50 {
		m := New[int](8)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			accepted int
		)
		for i := range 16 {
			wg.Go(func() {
				for j := range 20 {
					err := m.Send(context.Background(), i*100+j)
					if err != nil && !errors.Is(err, ErrClosed) {
						t.Errorf("Send: got %v, want nil or ErrClosed", err)
						return
					}
					if err == nil {
						mu.Lock()
						accepted++
						mu.Unlock()
					}
				}
			})
		}
		received := 0
		stop := make(chan struct{})
		recvDone := make(chan struct{})
		go func() {
			defer close(recvDone)
			for {
				select {
				case <-m.Receive():
					received++
					if received == 40 {
						m.Close()
					}
				case <-stop:
					return
				}
			}
		}()
		wg.Wait()
		close(stop)
		<-recvDone
		m.Drain(func(int) { received++ })
		if received != accepted {
			t.Fatalf("received %d messages, want the %d accepted", received, accepted)
		}
	}
}

func TestRequestReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[Call[int, int]](1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			c := <-m.Receive()
			if !c.Take() {
				t.Error("Take: got false, want true")
			}
			c.Reply(c.Req * 2)
			c.Reply(0) // a second reply is dropped, never blocks
		}()
		got, err := Request(t.Context(), m, done, 21)
		if err != nil || got != 42 {
			t.Fatalf("Request: got (%d, %v), want (42, nil)", got, err)
		}
		<-done
	})
}

// TestRequestUnblocks is the unblocking table: a request returns on ctx
// cancel, on actor exit before receiving, and on actor exit after receiving
// without replying.
func TestRequestUnblocks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unblock func(cancel context.CancelFunc, m *Mailbox[Call[int, int]], done chan struct{})
		want    error
	}{
		{"ctx canceled while waiting for reply", func(cancel context.CancelFunc, m *Mailbox[Call[int, int]], _ chan struct{}) {
			<-m.Receive()
			cancel()
		}, context.Canceled},
		{"actor exits after receiving", func(_ context.CancelFunc, m *Mailbox[Call[int, int]], done chan struct{}) {
			<-m.Receive()
			close(done)
		}, ErrClosed},
		{"mailbox closed while sender waits for room", func(_ context.CancelFunc, m *Mailbox[Call[int, int]], _ chan struct{}) {
			m.Close()
		}, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := New[Call[int, int]](1)
				if tc.name == "mailbox closed while sender waits for room" {
					_ = m.TrySend(NewCall[int, int](0)) // fill it
				}
				done := make(chan struct{})
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				errc := make(chan error, 1)
				go func() {
					_, err := Request(ctx, m, done, 1)
					errc <- err
				}()
				if tc.name == "mailbox closed while sender waits for room" {
					synctest.Wait()
				}
				tc.unblock(cancel, m, done)
				if err := <-errc; !errors.Is(err, tc.want) {
					t.Fatalf("got %v, want %v", err, tc.want)
				}
			})
		})
	}
}

func TestRequestAfterActorExit(t *testing.T) {
	m := New[Call[int, int]](1)
	done := make(chan struct{})
	close(done)
	if _, err := Request(t.Context(), m, done, 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Request after actor exit: got %v, want ErrClosed", err)
	}
}

func TestReplyBeforeExitIsDelivered(t *testing.T) {
	c := NewCall[int, int](1)
	c.Take()
	c.Reply(7)
	done := make(chan struct{})
	close(done)
	got, err := c.Wait(context.Background(), done)
	if err != nil || got != 7 {
		t.Fatalf("Wait: got (%d, %v), want (7, nil)", got, err)
	}
}

// TestWithdrawnCallIsNeverTaken: a caller whose ctx ends while its call is
// queued withdraws it, and the actor's Take then refuses it: the call is
// never acted on.
func TestWithdrawnCallIsNeverTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[Call[int, int]](1)
		done := make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := Request(ctx, m, done, 1)
			errc <- err
		}()
		synctest.Wait() // queued, waiting for the reply
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("Request withdrawn by its ctx: got %v, want context.Canceled", err)
		}
		c := <-m.Receive()
		if c.Take() {
			t.Fatal("Take of a withdrawn call: got true, want false")
		}
	})
}

// TestTakenCallWaitsForItsReply: once the actor has taken a call, the
// caller's ctx ending no longer withdraws it: the caller gets the real
// reply, so it never reports "canceled" for something that was done.
func TestTakenCallWaitsForItsReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[Call[int, int]](1)
		done := make(chan struct{})
		ctx, cancel := context.WithCancel(t.Context())
		type res struct {
			v   int
			err error
		}
		resc := make(chan res, 1)
		go func() {
			v, err := Request(ctx, m, done, 21)
			resc <- res{v, err}
		}()
		c := <-m.Receive()
		if !c.Take() {
			t.Fatal("Take of a pending call: got false, want true")
		}
		cancel()
		synctest.Wait() // the caller saw its ctx end and keeps waiting
		c.Reply(c.Req * 2)
		if r := <-resc; r.err != nil || r.v != 42 {
			t.Fatalf("Request taken before its ctx ended: got (%d, %v), want (42, nil)", r.v, r.err)
		}
	})
}

// TestDoneContextSendsNothing: a Request with a ctx that is already done
// never reaches the mailbox (no random choice between send and ctx.Done).
func TestDoneContextSendsNothing(t *testing.T) {
	m := New[Call[int, int]](1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for range 400 {
		if _, err := Request(ctx, m, nil, 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Request with a done ctx: got %v, want context.Canceled", err)
		}
	}
	select {
	case <-m.Receive():
		t.Fatal("a Request with a done ctx was queued")
	default:
	}
}

// TestReplyWithoutTakeIsDropped: the actor replies only to calls it has
// taken; a reply to a pending call never reaches the caller.
func TestReplyWithoutTakeIsDropped(t *testing.T) {
	c := NewCall[int, int](1)
	c.Reply(7)
	done := make(chan struct{})
	close(done)
	if _, err := c.Wait(context.Background(), done); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after a reply to an untaken call: got %v, want ErrClosed", err)
	}
}

// TestTakenCallAnsweredAtExit: a taken call whose actor exits after
// replying delivers the reply even though done is closed.
func TestTakenCallAnsweredAtExit(t *testing.T) {
	c := NewCall[int, int](1)
	if !c.Take() {
		t.Fatal("Take: got false, want true")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	c.Reply(7)
	done := make(chan struct{})
	close(done)
	if got, err := c.Wait(ctx, done); err != nil || got != 7 {
		t.Fatalf("Wait: got (%d, %v), want (7, nil)", got, err)
	}
}

// doubler is an actor that answers every call it takes with twice its
// request, until m is closed; done is closed as it exits.
func doubler(m *Mailbox[Call[int, int]], done chan struct{}) {
	defer close(done)
	for {
		select {
		case c := <-m.Receive():
			if c.Take() {
				c.Reply(c.Req * 2)
			}
		case <-m.Closed():
			return
		}
	}
}

// TestRequestViaReusesTheSlot: requests made one after another through a
// slot get their own replies and, after the first (which makes the reply
// channel), allocate nothing.
func TestRequestViaReusesTheSlot(t *testing.T) {
	m := New[Call[int, int]](1)
	done := make(chan struct{})
	go doubler(m, done)
	defer func() { m.Close(); <-done }()
	var s Slot[int]
	ctx := context.Background()
	for i := range 10 {
		if got, err := RequestVia(ctx, m, done, &s, i); err != nil || got != 2*i {
			t.Fatalf("request %d: got (%d, %v), want (%d, nil)", i, got, err, 2*i)
		}
	}
	n := 0
	if allocs := testing.AllocsPerRun(100, func() {
		n++
		if got, err := RequestVia(ctx, m, done, &s, n); err != nil || got != 2*n {
			t.Fatalf("got (%d, %v), want (%d, nil)", got, err, 2*n)
		}
	}); allocs != 0 {
		t.Fatalf("allocations per request through a free slot: got %v, want 0", allocs)
	}
}

// TestRequestViaConcurrent: concurrent requests through one slot (one
// holds it, the others make their own exchanges) each get their own reply.
func TestRequestViaConcurrent(t *testing.T) {
	m := New[Call[int, int]](2)
	done := make(chan struct{})
	go doubler(m, done)
	defer func() { m.Close(); <-done }()
	var s Slot[int]
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				req := g*1000 + i
				if got, err := RequestVia(context.Background(), m, done, &s, req); err != nil || got != 2*req {
					t.Errorf("got (%d, %v), want (%d, nil)", got, err, 2*req)
					return
				}
			}
		})
	}
	wg.Wait()
}

// TestRequestViaWithdrawnSlotIsNotReused: a call withdrawn while queued
// keeps its slot: the actor skips the stale call when it gets to it, and
// the next request, with an exchange of its own, is taken and answered as
// itself.
func TestRequestViaWithdrawnSlotIsNotReused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[Call[int, int]](2)
		done := make(chan struct{})
		var s Slot[int]
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := RequestVia(ctx, m, done, &s, 1)
			errc <- err
		}()
		synctest.Wait() // queued, waiting for the reply
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Fatalf("withdrawn request: got %v, want context.Canceled", err)
		}
		type res struct {
			v   int
			err error
		}
		resc := make(chan res, 1)
		go func() {
			v, err := RequestVia(t.Context(), m, done, &s, 21)
			resc <- res{v, err}
		}()
		synctest.Wait() // queued behind the withdrawn call
		stale := <-m.Receive()
		if stale.Take() {
			t.Fatal("Take of the withdrawn call: got true, want false")
		}
		c := <-m.Receive()
		if c.Req != 21 || !c.Take() {
			t.Fatalf("next call: got request %d, taken false; want 21, taken", c.Req)
		}
		c.Reply(c.Req * 2)
		stale.Reply(0) // never taken: dropped, and reaches no one
		if r := <-resc; r.err != nil || r.v != 42 {
			t.Fatalf("request after a withdrawn one: got (%d, %v), want (42, nil)", r.v, r.err)
		}
	})
}

// TestRequestWaitsForRoom: a request to a full mailbox waits (the slow
// path: the select) and is delivered, and answered, once the actor takes
// the message ahead of it.
func TestRequestWaitsForRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := New[Call[int, int]](1)
		_ = m.TrySend(NewCall[int, int](0)) // fill it
		done := make(chan struct{})
		type result struct {
			r   int
			err error
		}
		res := make(chan result, 1)
		go func() {
			r, err := Request(t.Context(), m, done, 21)
			res <- result{r, err}
		}()
		synctest.Wait() // the request waits for room
		if first := <-m.Receive(); first.Req != 0 {
			t.Fatalf("first message: got %d, want the one that filled the mailbox", first.Req)
		}
		c := <-m.Receive()
		if !c.Take() {
			t.Fatal("Take of the waiting request: got false, want true")
		}
		c.Reply(c.Req * 2)
		if got := <-res; got.err != nil || got.r != 42 {
			t.Fatalf("Request: got (%d, %v), want (42, nil)", got.r, got.err)
		}
		close(done)
	})
}

// BenchmarkRequestVia is one request and reply through a Slot to an actor
// that is waiting for it (the mailbox has room: the send takes the
// non-blocking path).
func BenchmarkRequestVia(b *testing.B) {
	m := New[Call[int, int]](2)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case c := <-m.Receive():
				if c.Take() {
					c.Reply(c.Req)
				}
			case <-done:
				return
			}
		}
	}()
	defer close(done)
	var s Slot[int]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RequestVia(ctx, m, done, &s, 1); err != nil {
			b.Fatal(err)
		}
	}
}
