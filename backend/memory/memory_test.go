package memory_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/backend/memory"
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/simtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	simtest.Conformance(t, simtest.Harness{
		Simulated: true,
		New: func(t *testing.T) leaseapi.Backend {
			s, err := memory.New(memory.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	})
}
