// Package telemetrytest checks the client's telemetry against real
// Valkey and PostgreSQL servers. It holds tests only.
package telemetrytest

import (
	"testing"

	"github.com/leasekit/lease/internal/backendtest"
)

func TestMain(m *testing.M) { backendtest.Main(m) }
