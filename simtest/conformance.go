package simtest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Harness describes a backend to the conformance suite. The same suite runs
// in simulated time (in-process backends whose clock is the time package's:
// every subtest runs inside a testing/synctest bubble, so waiting for expiry
// costs nothing) and in real time against real servers with short TTLs.
type Harness struct {
	// New returns a backend for one subtest, isolated from every other
	// subtest (its own store, key prefix or schema). It is called inside the
	// subtest (inside the bubble when Simulated) and registers its own
	// cleanup with t.Cleanup.
	New func(t *testing.T) leaseapi.Backend
	// Simulated runs each subtest inside synctest.Test.
	Simulated bool
	// TTL is the lease duration the expiry tests use. Real servers want a
	// short one (e.g. 300ms); zero means 2s.
	TTL time.Duration
	// Slack is added to every wait for expiry, to absorb the backend clock's
	// resolution and scheduling noise on real servers (e.g. 100ms). Zero
	// means 1ms.
	Slack time.Duration
	// Late, if set, returns a rig that makes b (a backend from New, in the
	// same subtest) execute a request after its deadline, for the check of
	// the not-after rule (LateExecutionIsNoop, see [LateRig]). It is
	// called once per held-back call and registers its own cleanup. Nil
	// skips that check.
	Late func(t *testing.T, b leaseapi.Backend) *LateRig
}

func (h Harness) ttl() time.Duration {
	if h.TTL > 0 {
		return h.TTL
	}
	return 2 * time.Second
}

func (h Harness) slack() time.Duration {
	if h.Slack > 0 {
		return h.Slack
	}
	return time.Millisecond
}

// pass lets d pass: instantly inside a synctest bubble, for real otherwise.
// It never orders goroutines; it only lets a backend's TTL run out.
func pass(d time.Duration) { time.Sleep(d) }

// conformanceCase is one behaviour every backend must have.
type conformanceCase struct {
	name string
	run  func(t *testing.T, h Harness, b leaseapi.Backend)
}

// Conformance runs the cross-backend conformance suite against h. Every
// subtest runs in parallel with a fresh backend from h.New. Backends that
// claim the optional capabilities (leaseapi.CapabilitiesOf: Inspect,
// WatchRelease, RenewBatch) are checked for them too, and every backend is
// checked for the capability rule: a wrapper that forwards only the four
// Backend methods is never less safe than the store it wraps.
func Conformance(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("simtest: Harness.New is nil")
	}
	for _, c := range append(conformanceCases[:len(conformanceCases):len(conformanceCases)], capabilityCases...) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if h.Simulated {
				synctest.Test(t, func(t *testing.T) { c.run(t, h, h.New(t)) })
				return
			}
			c.run(t, h, h.New(t))
		})
	}
}

var conformanceCases = []conformanceCase{
	{"AcquireFreeKey", testAcquireFree},
	{"ContendedByOtherOwner", testContended},
	{"ContendedBySameOwner", testContendedSameOwner},
	{"TokenIncreasesAcrossRelease", testTokenAcrossRelease},
	{"TokenIncreasesAcrossExpiry", testTokenAcrossExpiry},
	{"TokensArePerKey", testTokensPerKey},
	{"RenewKeepsTokenAndExtends", testRenewExtends},
	{"RenewStale", testRenewStale},
	{"RenewAfterExpiryIsStale", testRenewAfterExpiry},
	{"ValidateDoesNotExtend", testValidateDoesNotExtend},
	{"ValidateStale", testValidateStale},
	{"ReleaseIdempotent", testReleaseIdempotent},
	{"ReleaseStaleKeepsNewHolder", testReleaseStaleKeepsNewHolder},
	{"ReleaseExpiredWithoutSuccessor", testReleaseExpired},
	{"ReleaseWrongOwner", testReleaseWrongOwner},
	{"ExpiryFreesKey", testExpiryFreesKey},
	{"BadInput", testBadInput},
	{"CanceledContext", testCanceledContext},
	{"ConcurrentAcquireOneWinner", testConcurrentAcquire},
	{"ErrorsAreRedacted", testErrorsRedacted},
	{"Inspect", testInspect},
	{"ReleaseWatch", testReleaseWatch},
	{"RenewBatch", testRenewBatch},
	{"LateExecutionIsNoop", testLateExecution},
}

const (
	confNamespace = "conformance"
	ownerA        = "owner-a-0123456789abcdef"
	ownerB        = "owner-b-0123456789abcdef"
)

func key(t *testing.T, name string) leaseapi.Key {
	t.Helper()
	k, err := leaseapi.NewKey(confNamespace, name)
	if err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	return k
}

func acquire(t *testing.T, b leaseapi.Backend, k leaseapi.Key, owner string, ttl time.Duration) leaseapi.Record {
	t.Helper()
	rec, err := b.TryAcquire(t.Context(), k, owner, ttl)
	if err != nil {
		t.Fatalf("TryAcquire: got %v, want nil", err)
	}
	return rec
}

// validate calls b.Validate and checks the record it returns: on success,
// rec's key, owner and token with the backend's times of the grant, which
// are those of the latest Renew or TryAcquire that returned rec (Validate
// changes nothing); on error, the zero Record. It returns Validate's error.
func validate(t *testing.T, b leaseapi.Backend, ctx context.Context, rec leaseapi.Record) error {
	t.Helper()
	got, err := b.Validate(ctx, rec)
	if err != nil {
		if got != (leaseapi.Record{}) {
			t.Fatalf("Validate failed (%v) but returned a record with token %d", err, got.Token)
		}
		return err
	}
	if got.Key != rec.Key || got.Owner != rec.Owner || got.Token != rec.Token {
		t.Fatalf("Validate returned another grant: got token %d, want %d", got.Token, rec.Token)
	}
	if !got.AcquiredAt.Equal(rec.AcquiredAt) || !got.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("Validate returned times %v..%v, want the grant's %v..%v", got.AcquiredAt, got.ExpiresAt, rec.AcquiredAt, rec.ExpiresAt)
	}
	return nil
}

func wantKind(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want an error matching %v", what, err, want)
	}
	if want != nil && leaseapi.Kind(err) != want {
		t.Fatalf("%s: got kind %v, want exactly %v", what, leaseapi.Kind(err), want)
	}
}

// ttlClose reports whether got is want to within the millisecond resolution
// backends store.
func ttlClose(got, want time.Duration) bool {
	d := got - want
	return d > -2*time.Millisecond && d < 2*time.Millisecond
}

func testAcquireFree(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "free")
	rec := acquire(t, b, k, ownerA, h.ttl())
	if rec.Key != k || rec.Owner != ownerA {
		t.Fatalf("record names another grant: got key %q owner %q", rec.Key, rec.Owner)
	}
	if rec.Token == 0 {
		t.Fatal("token: got 0, want > 0")
	}
	if got := rec.GrantedTTL(); !ttlClose(got, h.ttl()) {
		t.Fatalf("ExpiresAt-AcquiredAt: got %v, want %v", got, h.ttl())
	}
	if err := validate(t, b, t.Context(), rec); err != nil {
		t.Fatalf("Validate fresh grant: got %v, want nil", err)
	}
}

func testContended(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "contended")
	acquire(t, b, k, ownerA, h.ttl())
	_, err := b.TryAcquire(t.Context(), k, ownerB, h.ttl())
	wantKind(t, "TryAcquire held key", err, leaseapi.ErrContended)
}

func testContendedSameOwner(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "same-owner")
	acquire(t, b, k, ownerA, h.ttl())
	_, err := b.TryAcquire(t.Context(), k, ownerA, h.ttl())
	wantKind(t, "TryAcquire by the holder itself", err, leaseapi.ErrContended)
}

func testTokenAcrossRelease(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "token-release")
	var last leaseapi.Token
	for i := range 5 {
		owner := ownerA
		if i%2 == 1 {
			owner = ownerB
		}
		rec := acquire(t, b, k, owner, h.ttl())
		if rec.Token <= last {
			t.Fatalf("acquisition %d: got token %d, want > %d", i, rec.Token, last)
		}
		last = rec.Token
		if err := b.Release(t.Context(), rec); err != nil {
			t.Fatalf("Release: got %v, want nil", err)
		}
	}
}

func testTokenAcrossExpiry(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "token-expiry")
	first := acquire(t, b, k, ownerA, h.ttl())
	pass(h.ttl() + h.slack())
	second := acquire(t, b, k, ownerB, h.ttl())
	if second.Token <= first.Token {
		t.Fatalf("token after expiry: got %d, want > %d", second.Token, first.Token)
	}
}

func testTokensPerKey(t *testing.T, h Harness, b leaseapi.Backend) {
	k1, k2 := key(t, "per-key/one"), key(t, "per-key/two")
	r1 := acquire(t, b, k1, ownerA, h.ttl())
	r2 := acquire(t, b, k2, ownerA, h.ttl())
	if err := validate(t, b, t.Context(), r1); err != nil {
		t.Fatalf("Validate first key: got %v, want nil", err)
	}
	if err := validate(t, b, t.Context(), r2); err != nil {
		t.Fatalf("Validate second key: got %v, want nil", err)
	}
	// A record of one key never validates another.
	cross := r1
	cross.Key = k2
	if r1.Token != r2.Token {
		cross.Token = r2.Token
	}
	cross.Owner = ownerB
	wantKind(t, "Validate with the other key's token and another owner", validate(t, b, t.Context(), cross), leaseapi.ErrStaleOwner)
}

func testRenewExtends(t *testing.T, h Harness, b leaseapi.Backend) {
	// On a loaded machine the pause of ttl/2 can stretch past the TTL, and
	// the renewal then rightly finds the grant gone: such an attempt proves
	// nothing and is repeated on a fresh key (as in ExpiryFreesKey). A
	// renewal refused less than a TTL after the grant was requested is a
	// violation.
	longer := 2 * h.ttl()
	var rec, got leaseapi.Record
	for attempt := 0; ; attempt++ {
		k := key(t, "renew-"+string(rune('a'+attempt)))
		start := time.Now()
		rec = acquire(t, b, k, ownerA, h.ttl())
		pass(h.ttl() / 2)
		var err error
		got, err = b.Renew(t.Context(), rec, longer)
		if err == nil {
			break
		}
		if leaseapi.Kind(err) != leaseapi.ErrStaleOwner || time.Since(start) < h.ttl() {
			t.Fatalf("Renew: got %v, want nil", err)
		}
		if attempt == 4 {
			t.Fatal("Renew: five attempts each took longer than a TTL; the machine is too loaded to check renewal")
		}
		t.Logf("Renew refused %v after the grant was requested, more than a TTL: inconclusive, again on a fresh key", time.Since(start))
	}
	if got.Token != rec.Token || got.Owner != rec.Owner || got.Key != rec.Key {
		t.Fatalf("Renew changed the grant: got token %d, want %d", got.Token, rec.Token)
	}
	if !got.ExpiresAt.After(rec.ExpiresAt) {
		t.Fatalf("Renew: ExpiresAt %v not after %v", got.ExpiresAt, rec.ExpiresAt)
	}
	if g := got.GrantedTTL(); !ttlClose(g, longer) {
		t.Fatalf("renewed ExpiresAt-AcquiredAt: got %v, want %v", g, longer)
	}
	// The renewal outlives the original expiry.
	pass(h.ttl()/2 + h.slack())
	if err := validate(t, b, t.Context(), got); err != nil {
		t.Fatalf("Validate after the original TTL: got %v, want nil", err)
	}
}

func testRenewStale(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "renew-stale")
	rec := acquire(t, b, k, ownerA, h.ttl())
	wrongOwner := rec
	wrongOwner.Owner = ownerB
	_, err := b.Renew(t.Context(), wrongOwner, h.ttl())
	wantKind(t, "Renew with another owner", err, leaseapi.ErrStaleOwner)
	wrongToken := rec
	wrongToken.Token++
	_, err = b.Renew(t.Context(), wrongToken, h.ttl())
	wantKind(t, "Renew with another token", err, leaseapi.ErrStaleOwner)

	if err := b.Release(t.Context(), rec); err != nil {
		t.Fatalf("Release: %v", err)
	}
	_, err = b.Renew(t.Context(), rec, h.ttl())
	wantKind(t, "Renew after release", err, leaseapi.ErrStaleOwner)

	next := acquire(t, b, k, ownerB, h.ttl())
	_, err = b.Renew(t.Context(), rec, h.ttl())
	wantKind(t, "Renew of a replaced grant", err, leaseapi.ErrStaleOwner)
	if err := validate(t, b, t.Context(), next); err != nil {
		t.Fatalf("the new holder after a stale renew: got %v, want nil", err)
	}
}

func testRenewAfterExpiry(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "renew-expired")
	rec := acquire(t, b, k, ownerA, h.ttl())
	pass(h.ttl() + h.slack())
	_, err := b.Renew(t.Context(), rec, h.ttl())
	wantKind(t, "Renew after expiry", err, leaseapi.ErrStaleOwner)
}

func testValidateDoesNotExtend(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "validate-no-extend")
	rec := acquire(t, b, k, ownerA, h.ttl())
	pass(h.ttl() / 2)
	if err := validate(t, b, t.Context(), rec); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
	pass(h.ttl()/2 + h.slack())
	wantKind(t, "Validate after expiry", validate(t, b, t.Context(), rec), leaseapi.ErrStaleOwner)
}

func testValidateStale(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "validate-stale")
	rec := acquire(t, b, k, ownerA, h.ttl())
	bad := rec
	bad.Owner = ownerB
	wantKind(t, "Validate with another owner", validate(t, b, t.Context(), bad), leaseapi.ErrStaleOwner)
	bad = rec
	bad.Token++
	wantKind(t, "Validate with another token", validate(t, b, t.Context(), bad), leaseapi.ErrStaleOwner)
	never := rec
	never.Key = key(t, "validate-stale-never-acquired")
	wantKind(t, "Validate of a key never acquired", validate(t, b, t.Context(), never), leaseapi.ErrStaleOwner)
}

func testReleaseIdempotent(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "release-twice")
	rec := acquire(t, b, k, ownerA, h.ttl())
	for i := range 3 {
		if err := b.Release(t.Context(), rec); err != nil {
			t.Fatalf("Release #%d: got %v, want nil", i+1, err)
		}
	}
	wantKind(t, "Validate after release", validate(t, b, t.Context(), rec), leaseapi.ErrStaleOwner)
	next := acquire(t, b, k, ownerB, h.ttl())
	if next.Token <= rec.Token {
		t.Fatalf("token after release: got %d, want > %d", next.Token, rec.Token)
	}
}

func testReleaseStaleKeepsNewHolder(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "release-stale")
	old := acquire(t, b, k, ownerA, h.ttl())
	pass(h.ttl() + h.slack())
	next := acquire(t, b, k, ownerB, h.ttl())
	wantKind(t, "Release of a replaced grant", b.Release(t.Context(), old), leaseapi.ErrStaleOwner)
	if err := validate(t, b, t.Context(), next); err != nil {
		t.Fatalf("new holder after a stale release: got %v, want nil", err)
	}
	_, err := b.TryAcquire(t.Context(), k, ownerA, h.ttl())
	wantKind(t, "TryAcquire after a stale release", err, leaseapi.ErrContended)
}

func testReleaseExpired(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "release-expired")
	rec := acquire(t, b, k, ownerA, h.ttl())
	pass(h.ttl() + h.slack())
	if err := b.Release(t.Context(), rec); err != nil {
		t.Fatalf("Release of an expired grant with no successor: got %v, want nil", err)
	}
}

func testReleaseWrongOwner(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "release-wrong-owner")
	rec := acquire(t, b, k, ownerA, h.ttl())
	bad := rec
	bad.Owner = ownerB
	wantKind(t, "Release with another owner", b.Release(t.Context(), bad), leaseapi.ErrStaleOwner)
	bad = rec
	bad.Token++
	wantKind(t, "Release with a future token", b.Release(t.Context(), bad), leaseapi.ErrStaleOwner)
	if err := validate(t, b, t.Context(), rec); err != nil {
		t.Fatalf("holder after refused releases: got %v, want nil", err)
	}
}

func testExpiryFreesKey(t *testing.T, h Harness, b leaseapi.Backend) {
	// On a loaded machine the pause of ttl/2 can stretch past the TTL, and
	// the second TryAcquire then rightly wins: such an attempt proves
	// nothing and is repeated on a fresh key. A win that returned less than
	// a TTL after the first grant was requested is a violation.
	for attempt := range 5 {
		k := key(t, "expiry-"+string(rune('a'+attempt)))
		start := time.Now()
		acquire(t, b, k, ownerA, h.ttl())
		pass(h.ttl() / 2)
		_, err := b.TryAcquire(t.Context(), k, ownerB, h.ttl())
		if err == nil && time.Since(start) >= h.ttl() {
			continue // inconclusive: the grant may have expired
		}
		wantKind(t, "TryAcquire before expiry", err, leaseapi.ErrContended)
		pass(h.ttl()/2 + h.slack())
		acquire(t, b, k, ownerB, h.ttl())
		return
	}
	t.Fatal("TryAcquire before expiry: five attempts each took longer than a TTL; the machine is too loaded to check expiry")
}

func testBadInput(t *testing.T, h Harness, b leaseapi.Backend) {
	ctx := t.Context()
	k := key(t, "bad-input")
	for _, tc := range []struct {
		name  string
		key   leaseapi.Key
		owner string
		ttl   time.Duration
	}{
		{"zero key", leaseapi.Key{}, ownerA, h.ttl()},
		{"empty owner", k, "", h.ttl()},
		{"owner with control byte", k, "own\x00er", h.ttl()},
		{"owner too long", k, strings.Repeat("o", leaseapi.MaxOwnerBytes+1), h.ttl()},
		{"zero ttl", k, ownerA, 0},
		{"negative ttl", k, ownerA, -time.Second},
		{"sub-millisecond ttl", k, ownerA, time.Microsecond},
		{"ttl over MaxTTL", k, ownerA, leaseapi.MaxTTL + time.Second},
	} {
		_, err := b.TryAcquire(ctx, tc.key, tc.owner, tc.ttl)
		wantKind(t, "TryAcquire with "+tc.name, err, leaseapi.ErrInvalidState)
	}
	// Nothing was granted by the refused calls.
	rec := acquire(t, b, k, ownerA, h.ttl())
	if rec.Token != 1 {
		// A backend may share a token counter with earlier runs only if
		// isolation is broken; tokens start at 1 for a fresh key.
		t.Fatalf("first token of a fresh key after refused calls: got %d, want 1", rec.Token)
	}
	for _, tc := range []struct {
		name string
		rec  leaseapi.Record
	}{
		{"zero record", leaseapi.Record{}},
		{"zero token", leaseapi.Record{Key: k, Owner: ownerA}},
		{"empty owner", leaseapi.Record{Key: k, Token: rec.Token}},
		{"zero key", leaseapi.Record{Owner: ownerA, Token: rec.Token}},
	} {
		_, err := b.Renew(ctx, tc.rec, h.ttl())
		wantKind(t, "Renew with "+tc.name, err, leaseapi.ErrInvalidState)
		wantKind(t, "Validate with "+tc.name, validate(t, b, ctx, tc.rec), leaseapi.ErrInvalidState)
		wantKind(t, "Release with "+tc.name, b.Release(ctx, tc.rec), leaseapi.ErrInvalidState)
	}
	_, err := b.Renew(ctx, rec, 0)
	wantKind(t, "Renew with zero ttl", err, leaseapi.ErrInvalidState)
	if err := validate(t, b, ctx, rec); err != nil {
		t.Fatalf("holder after refused calls: got %v, want nil", err)
	}
}

func testCanceledContext(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "canceled")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := b.TryAcquire(ctx, k, ownerA, h.ttl())
	wantKind(t, "TryAcquire with a canceled context", err, leaseapi.ErrCanceled)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("TryAcquire with a canceled context: got %v, want it to match context.Canceled", err)
	}
	rec := acquire(t, b, k, ownerB, h.ttl())
	_, err = b.Renew(ctx, rec, h.ttl())
	wantKind(t, "Renew with a canceled context", err, leaseapi.ErrCanceled)
	wantKind(t, "Validate with a canceled context", validate(t, b, ctx, rec), leaseapi.ErrCanceled)
	wantKind(t, "Release with a canceled context", b.Release(ctx, rec), leaseapi.ErrCanceled)
	if err := validate(t, b, t.Context(), rec); err != nil {
		t.Fatalf("holder after canceled calls: got %v, want nil", err)
	}
}

func testConcurrentAcquire(t *testing.T, h Harness, b leaseapi.Backend) {
	k := key(t, "race")
	const n = 16
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []leaseapi.Record
		errs    []error
	)
	for i := range n {
		wg.Go(func() {
			owner := ownerA[:len(ownerA)-2] + string(rune('a'+i%26)) + string(rune('a'+i/26))
			rec, err := b.TryAcquire(t.Context(), k, owner, h.ttl())
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				winners = append(winners, rec)
			} else {
				errs = append(errs, err)
			}
		})
	}
	start := time.Now()
	wg.Wait()
	took := time.Since(start)
	// Grants never overlap in backend time. More than one winner is
	// possible only when the attempts took longer than a TTL (a loaded
	// machine): a later winner then found the earlier grant expired.
	slices.SortFunc(winners, func(a, b leaseapi.Record) int { return cmp.Compare(a.Token, b.Token) })
	for i := 1; i < len(winners); i++ {
		if winners[i].AcquiredAt.Before(winners[i-1].ExpiresAt) {
			t.Fatalf("concurrent TryAcquire: grant %d (token %d) starts at %v, before grant %d (token %d) expires at %v",
				i, winners[i].Token, winners[i].AcquiredAt, i-1, winners[i-1].Token, winners[i-1].ExpiresAt)
		}
	}
	if len(winners) == 0 || len(winners) > 1 && took < h.ttl() {
		t.Fatalf("concurrent TryAcquire: got %d winners in %v, want 1", len(winners), took)
	}
	for _, err := range errs {
		wantKind(t, "concurrent TryAcquire loser", err, leaseapi.ErrContended)
	}
}

func testErrorsRedacted(t *testing.T, h Harness, b leaseapi.Backend) {
	const secret = "secret-key-name-4f1c"
	const secretOwner = "secret-owner-id-9a7b"
	k := key(t, secret)
	rec := acquire(t, b, k, secretOwner, h.ttl())
	other := rec
	other.Owner = "another-secret-owner"
	var errs []error
	_, err := b.TryAcquire(t.Context(), k, "another-secret-owner", h.ttl())
	errs = append(errs, err)
	_, err = b.Renew(t.Context(), other, h.ttl())
	errs = append(errs, err, validate(t, b, t.Context(), other), b.Release(t.Context(), other))
	_, err = b.TryAcquire(t.Context(), k, "bad\x01owner", h.ttl())
	errs = append(errs, err)
	for _, err := range errs {
		if err == nil {
			t.Fatal("expected an error")
		}
		msg := err.Error()
		for _, s := range []string{secret, secretOwner, "another-secret-owner", confNamespace} {
			if strings.Contains(msg, s) {
				t.Fatalf("error %q reveals %q", msg, s)
			}
		}
		if !strings.HasPrefix(msg, "lease: ") {
			t.Fatalf("error %q lacks the lease: prefix", msg)
		}
	}
}

func testInspect(t *testing.T, h Harness, b leaseapi.Backend) {
	if !leaseapi.CapabilitiesOf(b).Inspect {
		t.Skip("backend does not claim Inspect")
	}
	in := b.(leaseapi.Inspector)
	k := key(t, "inspect")
	rec, held, err := in.Inspect(t.Context(), k)
	if err != nil || held || rec.Token != 0 {
		t.Fatalf("Inspect of a fresh key: got (token %d, held %v, %v), want (0, false, nil)", rec.Token, held, err)
	}
	got := acquire(t, b, k, ownerA, h.ttl())
	rec, held, err = in.Inspect(t.Context(), k)
	if err != nil || !held || rec.Owner != ownerA || rec.Token != got.Token {
		t.Fatalf("Inspect of a held key: got (owner %q, token %d, held %v, %v), want (%q, %d, true, nil)", rec.Owner, rec.Token, held, err, ownerA, got.Token)
	}
	if !rec.ExpiresAt.Equal(got.ExpiresAt) {
		t.Fatalf("Inspect ExpiresAt: got %v, want %v", rec.ExpiresAt, got.ExpiresAt)
	}
	if err := b.Release(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	rec, held, err = in.Inspect(t.Context(), k)
	if err != nil || held || rec.Token != got.Token {
		t.Fatalf("Inspect after release: got (token %d, held %v, %v), want (%d, false, nil)", rec.Token, held, err, got.Token)
	}
	_, _, err = in.Inspect(t.Context(), leaseapi.Key{})
	wantKind(t, "Inspect of the zero key", err, leaseapi.ErrInvalidState)
}

func testReleaseWatch(t *testing.T, h Harness, b leaseapi.Backend) {
	if !leaseapi.CapabilitiesOf(b).WatchRelease {
		t.Skip("backend does not claim WatchRelease")
	}
	w := b.(leaseapi.ReleaseWatcher)
	k := key(t, "watch")
	other := key(t, "watch-other")
	ch, stop := w.WatchRelease(k)
	defer stop()
	otherCh, stopOther := w.WatchRelease(other)
	defer stopOther()
	rec := acquire(t, b, k, ownerA, h.ttl())
	if err := b.Release(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	// Real backends deliver through a server round trip: allow a generous
	// bound (it is a liveness check, not a latency figure).
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case <-ch:
	case <-wait.C:
		t.Fatal("no release notification within 5s")
	}
	select {
	case <-otherCh:
		t.Fatal("a watch of another key was notified")
	default:
	}
}

func testRenewBatch(t *testing.T, h Harness, b leaseapi.Backend) {
	if !leaseapi.CapabilitiesOf(b).RenewBatch {
		t.Skip("backend does not claim RenewBatch")
	}
	br := b.(leaseapi.BatchRenewer)
	live := acquire(t, b, key(t, "batch/live"), ownerA, h.ttl())
	stale := acquire(t, b, key(t, "batch/stale"), ownerA, h.ttl())
	stale.Token++
	res := br.RenewBatch(t.Context(), []leaseapi.RenewRequest{
		{Record: live, TTL: 2 * h.ttl()},
		{Record: stale, TTL: h.ttl()},
		{Record: leaseapi.Record{}, TTL: h.ttl()},
	})
	if len(res) != 3 {
		t.Fatalf("RenewBatch: got %d results, want 3", len(res))
	}
	if res[0].Err != nil || res[0].Record.Token != live.Token || !ttlClose(res[0].Record.GrantedTTL(), 2*h.ttl()) {
		t.Fatalf("RenewBatch live element: got (%v, ttl %v), want (nil, %v)", res[0].Err, res[0].Record.GrantedTTL(), 2*h.ttl())
	}
	wantKind(t, "RenewBatch stale element", res[1].Err, leaseapi.ErrStaleOwner)
	wantKind(t, "RenewBatch invalid element", res[2].Err, leaseapi.ErrInvalidState)
}
