package valkey_test

import (
	"testing"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// TestCapabilities: a Valkey store claims Inspect, WatchRelease and
// RenewBatch, never NeverBlocks, and Adopt only without WaitReplicas (a
// grant read back from the primary may be on no replica); an
// ObservedBackend around it claims exactly the same, and a Store that New
// did not make claims nothing. The runtime's behaviour on these claims with
// a real replica is TestRealReplicaFailover's (safety package).
func TestCapabilities(t *testing.T) {
	c := newClient(t, serverAddr(t))
	for _, tc := range []struct {
		name string
		o    valkey.Options
		want leaseapi.Capabilities
	}{
		{"default", valkey.Options{}, leaseapi.Capabilities{Inspect: true, Adopt: true, WatchRelease: true, RenewBatch: true}},
		{"WaitReplicas", valkey.Options{WaitReplicas: 1}, leaseapi.Capabilities{Inspect: true, WatchRelease: true, RenewBatch: true}},
	} {
		s := newStore(t, c, tc.o)
		if got := leaseapi.CapabilitiesOf(s); got != tc.want {
			t.Fatalf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		ob, err := runtime.NewObservedBackend(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := leaseapi.CapabilitiesOf(ob); got != tc.want {
			t.Fatalf("%s, observed: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for name, z := range map[string]*valkey.Store{"zero": {}, "nil": nil} {
		if got := leaseapi.CapabilitiesOf(z); got != (leaseapi.Capabilities{}) {
			t.Fatalf("%s Store: got %+v, want no claims", name, got)
		}
	}
}
