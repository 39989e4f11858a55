package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

func TestConformance(t *testing.T) {
	url := dbURL(t)
	pool := newPool(t, url)
	simtest.Conformance(t, simtest.Harness{
		TTL:   time.Second,
		Slack: 200 * time.Millisecond,
		New: func(t *testing.T) leaseapi.Backend {
			s, _ := newStore(t, url, pool)
			return s
		},
		Late: func(t *testing.T, b leaseapi.Backend) *simtest.LateRig { return lateRig(t, url, pool, b) },
	})
}

// TestConformanceExecModes runs the suite with the pool's other query exec
// modes (as used behind PgBouncer in transaction mode): every parameter
// carries an explicit type, so no statement depends on prepared-statement
// type inference.
func TestConformanceExecModes(t *testing.T) {
	url := dbURL(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := newPool(t, url, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			simtest.Conformance(t, simtest.Harness{
				TTL:   time.Second,
				Slack: 200 * time.Millisecond,
				New: func(t *testing.T) leaseapi.Backend {
					s, _ := newStore(t, url, pool)
					return s
				},
			})
		})
	}
}
