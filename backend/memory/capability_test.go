package memory_test

import (
	"testing"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// TestCapabilities: the memory store claims every capability (its reads
// are the grant itself, and nothing blocks); a Store that New did not make
// claims nothing; an ObservedBackend around it claims exactly the same.
func TestCapabilities(t *testing.T) {
	s, err := memory.New(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true, NeverBlocks: true}
	if got := leaseapi.CapabilitiesOf(s); got != want {
		t.Fatalf("memory store: got %+v, want %+v", got, want)
	}
	ob, err := runtime.NewObservedBackend(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := leaseapi.CapabilitiesOf(ob); got != want {
		t.Fatalf("observed memory store: got %+v, want %+v", got, want)
	}
	for name, z := range map[string]*memory.Store{"zero": {}, "nil": nil} {
		if got := leaseapi.CapabilitiesOf(z); got != (leaseapi.Capabilities{}) {
			t.Fatalf("%s Store: got %+v, want no claims", name, got)
		}
	}
}
