package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestScheduler runs the example as its doc tells users to.
func TestScheduler(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
