package valkey_test

import (
	"context"
	_ "embed"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest/storetest"
	"github.com/leasekit/lease/internal/testserver"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// The previous version's scripts that differ in the release notification
// (testdata/v1: its watching acquisition marks the grant and queues
// nothing; its release publishes E on "P:released"), run by EVAL as a
// Store of that version would.
var (
	//go:embed testdata/v1/acquire_watching.lua
	v1AcquireWatching string
	//go:embed testdata/v1/release.lua
	v1Release string
)

// waitSet returns the ids queued in k's wait set, oldest first.
func waitSet(t *testing.T, c vk.Client, s *valkey.Store, k leaseapi.Key) []string {
	t.Helper()
	lease, _ := s.Keys(k)
	ids, err := c.Do(t.Context(), c.B().Zrange().Key(strings.TrimSuffix(lease, "lease")+"wait").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// leaseValue returns k's lease value ("" when the key is free).
func leaseValue(t *testing.T, c vk.Client, s *valkey.Store, k leaseapi.Key) string {
	t.Helper()
	lease, _ := s.Keys(k)
	v, err := c.Do(t.Context(), c.B().Get().Key(lease).Build()).ToString()
	if err != nil && !vk.IsValkeyNil(err) {
		t.Fatal(err)
	}
	return v
}

// notWoken proves that ch received nothing from what the server published
// before this call: it publishes a sentinel release of another key on the
// channel (the Store's own channel ID, or "" for the broadcast one) and
// waits for the Store s to receive it; messages on one subscription
// arrive in the order the server published them.
func notWoken(t *testing.T, c vk.Client, s *valkey.Store, prefix, id string, ch <-chan struct{}) {
	t.Helper()
	sentinel := leaseapi.MustKey("ns", "sentinel")
	sch, stop := s.WatchRelease(sentinel)
	defer stop()
	channel := prefix + ":released"
	if id != "" {
		channel += ":" + id
	}
	if err := c.Do(t.Context(), c.B().Publish().Channel(channel).Message("ns/sentinel").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sch:
	case <-time.After(10 * time.Second):
		t.Fatal("the sentinel did not arrive within 10s")
	}
	select {
	case <-ch:
		t.Fatal("a Store that was not first in the queue was woken")
	default:
	}
}

// received waits for ch (10s at most: a notification takes milliseconds).
func received(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no notification within 10s", what)
	}
}

// TestReleaseWakesTheOldestQueuedStore queues three watching Stores on a
// held key and shows that each release wakes exactly one, the one queued
// longest: in the order they first found the key held, the others staying
// queued and asleep; a grant made while others are queued is marked from
// the start, and the last one is not.
func TestReleaseWakesTheOldestQueuedStore(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	admin := newClient(t, addr)
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	k := leaseapi.MustKey("ns", "fifo")
	var ws []*valkey.Store
	var chans []<-chan struct{}
	var ids []string
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
		warmWatch(t, w, holder)
		ch, stop := w.WatchRelease(k)
		t.Cleanup(stop)
		markWaiting(t, w, k)
		markWaiting(t, w, k) // a second attempt keeps its place
		ws, chans, ids = append(ws, w), append(chans, ch), append(ids, valkey.StoreID(w))
	}
	if got := waitSet(t, admin, holder, k); !slices.Equal(got, ids) {
		t.Fatalf("wait set %v, want %v (the order of the first attempts)", got, ids)
	}
	rel := holder
	for turn, w := range ws {
		if err := rel.Release(t.Context(), rec); err != nil {
			t.Fatal(err)
		}
		received(t, chans[turn], "the Store queued longest")
		for j := turn + 1; j < len(ws); j++ {
			notWoken(t, admin, ws[j], prefix, ids[j], chans[j])
		}
		if got := waitSet(t, admin, holder, k); !slices.Equal(got, ids[turn+1:]) {
			t.Fatalf("turn %d: wait set %v, want %v", turn, got, ids[turn+1:])
		}
		if rec, err = w.TryAcquire(t.Context(), k, "owner-w-"+strconv.Itoa(turn)+"-0123456789", 10*time.Second); err != nil {
			t.Fatalf("turn %d: the woken Store's attempt: %v", turn, err)
		}
		marked := strings.Contains(leaseValue(t, admin, holder, k), "!")
		if want := turn < len(ws)-1; marked != want {
			t.Fatalf("turn %d: the grant is marked: %v, want %v (Stores still queued: %v)", turn, marked, want, want)
		}
		rel = w
	}
	if err := rel.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	if got := waitSet(t, admin, holder, k); len(got) != 0 {
		t.Fatalf("wait set %v after the last turn, want it gone", got)
	}
}

// TestWokenStoreKeepsItsTurn: a Store woken in its turn whose attempt finds
// the key taken (by a TryAcquire that did not wait) queues again at the
// front, so the next release is its turn again, not that of the Store
// queued behind it.
func TestWokenStoreKeepsItsTurn(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	admin := newClient(t, addr)
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	a := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	b := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, a, holder)
	warmWatch(t, b, holder)
	k := leaseapi.MustKey("ns", "turn")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cha, stopA := a.WatchRelease(k)
	defer stopA()
	chb, stopB := b.WatchRelease(k)
	defer stopB()
	markWaiting(t, a, k)
	markWaiting(t, b, k)
	ida, idb := valkey.StoreID(a), valkey.StoreID(b)
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	received(t, cha, "the Store queued first")
	if rec, err = holder.TryAcquire(t.Context(), k, ownerB, 10*time.Second); err != nil { // takes the key first
		t.Fatal(err)
	}
	markWaiting(t, a, k)
	if got := waitSet(t, admin, holder, k); !slices.Equal(got, []string{ida, idb}) {
		t.Fatalf("wait set %v, want %v: the woken Store back at the front", got, []string{ida, idb})
	}
	markWaiting(t, a, k) // a later attempt keeps the place, and does not move it
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	received(t, cha, "the Store whose turn it still is")
	notWoken(t, admin, b, prefix, idb, chb)
	if got := waitSet(t, admin, holder, k); !slices.Equal(got, []string{idb}) {
		t.Fatalf("wait set %v, want %v", got, []string{idb})
	}
}

// wakeSleeper is a real sleeper (a timer, cut short by the release watch
// or ctx) that signals each pause (Sleeping, buffer 1, never blocking) and
// counts the pauses a release notification cut short.
type wakeSleeper struct {
	Sleeping chan struct{}
	woken    *atomic.Int64
}

func (s wakeSleeper) Sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	select {
	case s.Sleeping <- struct{}{}:
	default:
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-wake:
		s.woken.Add(1)
	case <-tm.C:
	}
	return nil
}

// waiter is a runtime Acquire of k through a Store, waiting (Wait: an
// hour) with the retry interval given, on a wakeSleeper.
type waiter struct {
	sl    wakeSleeper
	woken *atomic.Int64
	done  chan waitResult
}

type waitResult struct {
	h   *runtime.Handle
	err error
}

// startWaiter starts a waiter of k on s whose retry interval is retry;
// wait for its first pause on w.sl.Sleeping.
func startWaiter(t *testing.T, s *valkey.Store, k leaseapi.Key, retry time.Duration) waiter {
	t.Helper()
	w := waiter{woken: new(atomic.Int64), done: make(chan waitResult, 1)}
	w.sl = wakeSleeper{make(chan struct{}, 1), w.woken}
	c := storetest.NewClient(t, s, runtime.ClientOptions{Sleeper: w.sl})
	p, err := leaseapi.NewPolicy(leaseapi.PolicyOptions{TTL: max(10*time.Second, 2*retry), Wait: time.Hour, Retry: retry})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		h, err := c.Acquire(t.Context(), k, p)
		w.done <- waitResult{h, err}
	}()
	return w
}

// acquired waits for the waiter's Acquire to succeed (10s at most: the
// tests that call it give it a notification or a short retry interval)
// and releases its grant when the test ends.
func (w waiter) acquired(t *testing.T, what string) {
	t.Helper()
	select {
	case r := <-w.done:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		t.Cleanup(func() { _ = r.h.Release(context.Background()) })
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: not acquired within 10s", what)
	}
}

// TestStaleHeadCostsOneRetry: the Store first in the wait set is gone
// (closed while queued), so the release that pops it wakes nobody; the next
// queued Store's waiter acquires on its retry timer, one retry interval
// late, not woken, and the wait set is then empty (the stale entry popped,
// the waiter's own removed by its grant).
func TestStaleHeadCostsOneRetry(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	admin := newClient(t, addr)
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	gone := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	next := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, gone, holder)
	warmWatch(t, next, holder)
	k := leaseapi.MustKey("ns", "stale-head")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := gone.WatchRelease(k)
	markWaiting(t, gone, k)
	stop()
	gone.Close()

	w := startWaiter(t, next, k, 200*time.Millisecond)
	<-w.sl.Sleeping // its first attempt found the key held and queued it
	if got, want := waitSet(t, admin, holder, k), []string{valkey.StoreID(gone), valkey.StoreID(next)}; !slices.Equal(got, want) {
		t.Fatalf("wait set %v, want %v", got, want)
	}
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	w.acquired(t, "the waiter behind the stale entry")
	if n := w.woken.Load(); n != 0 {
		t.Fatalf("the waiter was woken %d times, want 0 (the release woke the stale head)", n)
	}
	if got := waitSet(t, admin, holder, k); len(got) != 0 {
		t.Fatalf("wait set %v, want it gone", got)
	}
}

// withdraw makes s, which is subscribed, queue for k (held by another
// owner) and then stop watching it, alive: its waiters gave up.
func withdraw(t *testing.T, s *valkey.Store, k leaseapi.Key) {
	t.Helper()
	_, stop := s.WatchRelease(k)
	markWaiting(t, s, k)
	stop()
}

// passBlocker is a pass hook (valkey.SetPassHook) that holds the passer
// before its pass of a turn for a key whose ident contains name: it sends
// the ident on entered, then waits for release or for the passer's ctx
// (canceled by Close). Other keys (the warm-up's) pass at once.
type passBlocker struct {
	name    string
	entered chan string
	release chan struct{}
}

func newPassBlocker(name string) passBlocker {
	return passBlocker{name, make(chan string, 1), make(chan struct{})}
}

func (b passBlocker) hook(ctx context.Context, ident string) {
	if !strings.Contains(ident, b.name) {
		return
	}
	b.entered <- ident
	select {
	case <-b.release:
	case <-ctx.Done():
	}
}

// TestWithdrawnStoresPassTheTurn: the two Stores first in the wait set
// stopped waiting but are alive, so each passes on the turn the release
// gives it; the Store queued behind them is woken by that one release,
// not by its retry timer (half an hour, far past the test's bound), and
// the wait set is then empty.
func TestWithdrawnStoresPassTheTurn(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	admin := newClient(t, addr)
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	k := leaseapi.MustKey("ns", "withdrawn")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 2 {
		left := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
		warmWatch(t, left, holder)
		withdraw(t, left, k)
		ids = append(ids, valkey.StoreID(left))
	}
	next := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, next, holder)
	w := startWaiter(t, next, k, 30*time.Minute)
	<-w.sl.Sleeping
	if got, want := waitSet(t, admin, holder, k), append(ids, valkey.StoreID(next)); !slices.Equal(got, want) {
		t.Fatalf("wait set %v, want %v", got, want)
	}
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	w.acquired(t, "the waiter behind the withdrawn Stores")
	if n := w.woken.Load(); n != 1 {
		t.Fatalf("the waiter was woken %d times, want 1 (by the release its turn was passed from)", n)
	}
	if got := waitSet(t, admin, holder, k); len(got) != 0 {
		t.Fatalf("wait set %v, want it gone", got)
	}
}

// heldTurn is a withdrawn Store (left) holding the turn of a release of
// k that it will pass on: its passer held by b, a waiter (w, on another
// Store) queued behind it.
type heldTurn struct {
	admin        vk.Client
	holder, left *valkey.Store
	k            leaseapi.Key
	b            passBlocker
	w            waiter
}

// holdTurn makes a heldTurn of the key ns/name, the waiter's retry
// interval being retry.
func holdTurn(t *testing.T, name string, retry time.Duration) heldTurn {
	t.Helper()
	addr := serverAddr(t)
	prefix := uniquePrefix()
	h := heldTurn{admin: newClient(t, addr), k: leaseapi.MustKey("ns", name), b: newPassBlocker(name)}
	h.holder = newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	h.left = newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	next := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	valkey.SetPassHook(h.left, h.b.hook)
	warmWatch(t, h.left, h.holder)
	warmWatch(t, next, h.holder)
	rec, err := h.holder.TryAcquire(t.Context(), h.k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	withdraw(t, h.left, h.k)
	h.w = startWaiter(t, next, h.k, retry)
	<-h.w.sl.Sleeping
	if err := h.holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	<-h.b.entered // the turn reached the withdrawn Store
	return h
}

// TestCloseDropsThePass: a withdrawn Store closed while it holds a turn
// to pass (its passer held before the pass) returns from Close, passes
// nothing (the waiter behind it is never woken: it acquires on its retry
// timer, as behind a Store that is gone) and leaves no goroutine behind
// (TestMain's goleak).
func TestCloseDropsThePass(t *testing.T) {
	h := holdTurn(t, "close-while-passing", 200*time.Millisecond)
	h.left.Close()
	h.w.acquired(t, "the waiter behind the closed Store")
	if n := h.w.woken.Load(); n != 0 {
		t.Fatalf("the waiter was woken %d times, want 0 (the closed Store passed its turn)", n)
	}
	if got := waitSet(t, h.admin, h.holder, h.k); len(got) != 0 {
		t.Fatalf("wait set %v, want it gone", got)
	}
}

// TestRewatchBeforeThePass: the turn reaches a withdrawn Store, which
// watches the key again and takes it (the key is free) before its passer
// runs; the turn is neither lost nor doubled: the release of that grant
// (marked, the waiter being queued) wakes the waiter behind it, once, not
// its retry timer.
func TestRewatchBeforeThePass(t *testing.T) {
	h := holdTurn(t, "rewatch", 30*time.Minute)
	_, stop := h.left.WatchRelease(h.k)
	defer stop()
	rec, err := h.left.TryAcquire(t.Context(), h.k, ownerB, 10*time.Second)
	if err != nil {
		t.Fatalf("the re-watching Store's attempt: %v", err)
	}
	if v := leaseValue(t, h.admin, h.holder, h.k); !strings.Contains(v, "!") {
		t.Fatalf("lease value %q: the grant made while a Store is queued is not marked", v)
	}
	close(h.b.release)
	if err := h.left.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	h.w.acquired(t, "the waiter behind the re-watching Store")
	if n := h.w.woken.Load(); n != 1 {
		t.Fatalf("the waiter was woken %d times, want 1", n)
	}
	if got := waitSet(t, h.admin, h.holder, h.k); len(got) != 0 {
		t.Fatalf("wait set %v, want it gone", got)
	}
}

// TestTurnToAStoppingWatch: a turn that reaches a watching Store whose
// watch then stops before any attempt is not passed on (it was given to
// the watch): the waiter queued behind acquires on its retry timer, one
// retry interval late, not woken.
func TestTurnToAStoppingWatch(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	first := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	next := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, first, holder)
	warmWatch(t, next, holder)
	k := leaseapi.MustKey("ns", "stopping-watch")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := first.WatchRelease(k)
	markWaiting(t, first, k)
	w := startWaiter(t, next, k, 200*time.Millisecond)
	<-w.sl.Sleeping
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	received(t, ch, "the Store queued first")
	stop()
	w.acquired(t, "the waiter behind the stopped watch")
	if n := w.woken.Load(); n != 0 {
		t.Fatalf("the waiter was woken %d times, want 0", n)
	}
}

// TestQueueByEvalsha: the queue works the same when the Stores run their
// scripts by EVALSHA (their ACL user may not use functions).
func TestQueueByEvalsha(t *testing.T) {
	srv := privateServer(t, testserver.RedisOptions{})
	admin := newClient(t, srv.Addr())
	prefix := uniquePrefix()
	user := "u-" + uniquePrefix()
	rules := storeRules(prefix)
	aclUser(t, admin, user, "secret-pw", rules[:len(rules)-len(functionRules)]...)
	store := func() *valkey.Store {
		return newStore(t, newClientOpt(t, vk.ClientOption{InitAddress: []string{srv.Addr()}, Username: user, Password: "secret-pw"}), valkey.Options{Prefix: prefix})
	}
	holder, w := store(), store()
	warmWatch(t, w, holder)
	k := leaseapi.MustKey("ns", "evalsha")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ch, stop := w.WatchRelease(k)
	defer stop()
	markWaiting(t, w, k)
	if got := waitSet(t, admin, holder, k); !slices.Equal(got, []string{valkey.StoreID(w)}) {
		t.Fatalf("wait set %v, want the waiter queued", got)
	}
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	received(t, ch, "the queued Store")
	if got := waitSet(t, admin, holder, k); len(got) != 0 {
		t.Fatalf("wait set %v after the release, want it popped", got)
	}
	if calls, _ := commandCalls(t, admin, "fcall"); calls != 0 {
		t.Fatalf("%d FCALL ran, want none (the user may not)", calls)
	}
}

// TestDeafStoreDoesNotQueue: a watching Store whose subscription is not
// confirmed (here its ACL user may not SUBSCRIBE) marks the grant but does
// not queue, since it could not hear its turn; the release of that grant
// is broadcast.
func TestDeafStoreDoesNotQueue(t *testing.T) {
	addr := serverAddr(t)
	admin := newClient(t, addr)
	prefix := uniquePrefix()
	user := "u-" + uniquePrefix()
	aclUser(t, admin, user, "secret-pw", slices.DeleteFunc(storeRules(prefix), func(r string) bool { return r == "+subscribe" })...)
	deaf := newStore(t, newClientOpt(t, vk.ClientOption{InitAddress: []string{addr}, Username: user, Password: "secret-pw"}), valkey.Options{Prefix: prefix})
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	k := leaseapi.MustKey("ns", "deaf")
	rec, err := holder.TryAcquire(t.Context(), k, ownerA, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := deaf.WatchRelease(k)
	defer stop()
	markWaiting(t, deaf, k)
	if v := leaseValue(t, admin, holder, k); !strings.Contains(v, "!") {
		t.Fatalf("lease value %q: the deaf Store's attempt did not mark it", v)
	}
	if got := waitSet(t, admin, holder, k); len(got) != 0 {
		t.Fatalf("wait set %v: the deaf Store queued", got)
	}
	listener := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, listener, holder)
	ch, stopL := listener.WatchRelease(k)
	defer stopL()
	if err := holder.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	received(t, ch, "a watching Store, from the broadcast release") // it never attempted: only the broadcast reaches it
}

// TestMixedVersions runs Stores of this version with the previous
// version's scripts (testdata/v1, by EVAL) on one prefix: a release of this
// version wakes an old waiter (on "P:released") when no new Store is
// queued and, when one is, wakes that one alone (the old waiter then
// acquires on its retry timer); an old release wakes a queued new Store.
func TestMixedVersions(t *testing.T) {
	addr := serverAddr(t)
	prefix := uniquePrefix()
	admin := newClient(t, addr)
	holder := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	k := leaseapi.MustKey("ns", "mixed")
	lease, token := holder.Keys(k)
	ctx := t.Context()

	// A new Store, subscribed before the old Store's subscription starts
	// (its warm-up releases may be broadcast).
	w := newStore(t, newClient(t, addr), valkey.Options{Prefix: prefix})
	warmWatch(t, w, holder)

	// An old Store's subscription: the broadcast channel only.
	old := newClient(t, addr)
	oldWoken := make(chan string, 16)
	sub, subCancel := context.WithCancel(ctx)
	subDone := make(chan struct{})
	subscribed := make(chan struct{}, 1)
	go func() {
		defer close(subDone)
		hctx := vk.WithOnSubscriptionHook(sub, func(vk.PubSubSubscription) {
			select {
			case subscribed <- struct{}{}:
			default:
			}
		})
		_ = old.Receive(hctx, old.B().Subscribe().Channel(prefix+":released").Build(), func(m vk.PubSubMessage) {
			oldWoken <- m.Message
		})
	}()
	defer func() { subCancel(); <-subDone }()
	<-subscribed
	oldMark := func() { // an old waiter's contended attempt
		t.Helper()
		reply, err := old.Do(ctx, old.B().Eval().Script(v1AcquireWatching).Numkeys(2).Key(lease, token).Arg("owner-old-0123456789", "10000000", "0", "42").Build()).ToString()
		if err != nil || reply != "2 42" {
			t.Fatalf("the old waiter's attempt: %q, %v; want contended", reply, err)
		}
	}
	oldGot := func(want string) {
		t.Helper()
		select {
		case m := <-oldWoken:
			if m != want {
				t.Fatalf("the old Store received %q, want %q", m, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the old Store received nothing within 10s, want %q", want)
		}
	}
	acquire := func() leaseapi.Record {
		t.Helper()
		rec, err := holder.TryAcquire(ctx, k, ownerA, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	ident := strings.TrimSuffix(strings.TrimPrefix(lease, prefix+":{"), "}:lease")

	// An old waiter alone: the new release broadcasts.
	rec := acquire()
	oldMark()
	if err := holder.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	oldGot(ident)

	// A new waiter queued, an old one marked: the new Store alone is woken.
	ch, stop := w.WatchRelease(k)
	defer stop()
	rec = acquire()
	oldMark()
	markWaiting(t, w, k)
	if err := holder.Release(ctx, rec); err != nil {
		t.Fatal(err)
	}
	received(t, ch, "the queued new Store")
	if err := admin.Do(ctx, admin.B().Publish().Channel(prefix+":released").Message("sentinel").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	oldGot("sentinel") // nothing before it: the old waiter was not woken

	// A new waiter queued, an old release: the broadcast wakes it.
	rec = acquire()
	markWaiting(t, w, k)
	expected := strconv.FormatInt(rec.GrantedTTL().Microseconds(), 10) + ":" + strconv.FormatUint(uint64(rec.Token), 10) + ":" + rec.Owner
	reply, err := old.Do(ctx, old.B().Eval().Script(v1Release).Numkeys(1).Key(lease).Arg(expected, "43").Build()).ToString()
	if err != nil || reply != "1 43" {
		t.Fatalf("the old release: %q, %v; want released", reply, err)
	}
	received(t, ch, "the new Store, from an old release")
	oldGot(ident)
}
