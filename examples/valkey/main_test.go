package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/internal/testenv"
	"github.com/leasekit/lease/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.IgnoredLeaks...) }

func TestExample(t *testing.T) {
	addr, stop, err := testserver.Redis()
	defer stop()
	if reason := testserver.SkipReason("valkey", testserver.EnvValkeyAddr, err); reason != "" {
		t.Skip(reason)
	}
	t.Setenv("VALKEY_ADDR", addr)
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"acquired with token", "active", "accepted", "second holder acquired", "refused", "second holder"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
	t.Log(out.String())
}
