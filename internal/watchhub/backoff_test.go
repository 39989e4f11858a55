package watchhub_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasekit/lease/internal/watchhub"
)

func TestBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := watchhub.Backoff{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}
		wait := func() time.Duration {
			t.Helper()
			start := time.Now()
			if !b.Wait(t.Context()) {
				t.Fatal("Wait: got false, want true")
			}
			return time.Since(start)
		}
		for i, want := range []time.Duration{10, 20, 40, 40} {
			if got := wait(); got != want*time.Millisecond {
				t.Fatalf("wait %d: got %v, want %v", i+1, got, want*time.Millisecond)
			}
		}
		b.Reset()
		if got := wait(); got != 10*time.Millisecond {
			t.Fatalf("wait after Reset: got %v, want 10ms", got)
		}

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		start := time.Now()
		if b.Wait(ctx) {
			t.Fatal("Wait with a canceled ctx: got true, want false")
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("Wait with a canceled ctx took %v, want 0", d)
		}
		if got := wait(); got != 20*time.Millisecond {
			t.Fatalf("wait after a canceled one: got %v, want 20ms (unchanged delay)", got)
		}
	})
}
