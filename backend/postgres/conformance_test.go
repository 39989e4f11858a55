package postgres_test

import (
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

func TestConformance(t *testing.T) {
	url := dbURL(t)
	pool := newPool(t, url)
	simtest.Conformance(t, simtest.Harness{
		TTL:   300 * time.Millisecond,
		Slack: 100 * time.Millisecond,
		New: func(t *testing.T) leaseapi.Backend {
			s, _ := newStore(t, url, pool)
			return s
		},
	})
}
