package postgres_test

import (
	"testing"

	"github.com/leasekit/lease/backend/postgres"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// TestCapabilities: a PostgreSQL store claims Inspect, Adopt (a grant read
// back is a committed row), WatchRelease and RenewBatch, never NeverBlocks;
// an ObservedBackend around it claims exactly the same, and a Store that
// New did not make claims nothing.
func TestCapabilities(t *testing.T) {
	url := dbURL(t)
	s, _ := newStore(t, url, newPool(t, url))
	want := leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true}
	if got := leaseapi.CapabilitiesOf(s); got != want {
		t.Fatalf("postgres store: got %+v, want %+v", got, want)
	}
	ob, err := runtime.NewObservedBackend(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseapi.CapabilitiesOf(ob); got != want {
		t.Fatalf("observed postgres store: got %+v, want %+v", got, want)
	}
	for name, z := range map[string]*postgres.Store{"zero": {}, "nil": nil} {
		if got := leaseapi.CapabilitiesOf(z); got != (leaseapi.Capabilities{}) {
			t.Fatalf("%s Store: got %+v, want no claims", name, got)
		}
	}
}
