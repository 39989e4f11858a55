package safety_test

import (
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

// stops holds the stop functions of the private servers the real-server
// tier starts lazily (so that the simulation tier and the mutation runs
// start none); TestMain stops them after the leak check.
var (
	stopsMu sync.Mutex
	stops   []func()
)

// atExit registers stop to run after the tests and the leak check.
func atExit(stop func()) {
	stopsMu.Lock()
	defer stopsMu.Unlock()
	stops = append(stops, stop)
}

func stopAll() {
	stopsMu.Lock()
	defer stopsMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(slices.Clone(testenv.IgnoredLeaks), testserver.StopAtExit(stopAll))...)
}
