package serveraudit_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.IgnoredLeaks...)
}
