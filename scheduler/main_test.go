package scheduler_test

import (
	"testing"

	"github.com/leasekit/lease/internal/backendtest"
)

// TestMain checks for leaked goroutines and stops the real servers the
// tests started (backendtest.Main).
func TestMain(m *testing.M) { backendtest.Main(m) }
