package service_test

import (
	"os"
	"slices"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
)

// stops holds the stop functions of the real servers the tests started
// lazily (realbackend_test.go); they run after the leak check.
var (
	stopsMu sync.Mutex
	stops   []func()
)

func TestMain(m *testing.M) {
	opts := append(slices.Clone(testenv.IgnoredLeaks),
		// valkey-go's cluster client closes replaced connections from a
		// goroutine that can outlive Client.Close (see backend/valkey).
		goleak.IgnoreAnyFunction("github.com/valkey-io/valkey-go.(*clusterClient)._refresh.func2"),
		goleak.Cleanup(func(code int) {
			stopsMu.Lock()
			defer stopsMu.Unlock()
			for _, stop := range stops {
				stop()
			}
			os.Exit(code)
		}))
	goleak.VerifyTestMain(m, opts...)
}
