package valkey_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

func TestConformance(t *testing.T) {
	c := newClient(t, serverAddr(t))
	simtest.Conformance(t, simtest.Harness{
		TTL:   time.Second,
		Slack: 200 * time.Millisecond,
		New: func(t *testing.T) leaseapi.Backend {
			return newStore(t, c, valkey.Options{})
		},
	})
}
