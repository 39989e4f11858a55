package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestTelemetryExample runs the example briefly, with the stdout exporter,
// and checks that the fleet's work shows in what it printed: acquisitions,
// renewals, the partitioned worker's loss, and spans.
func TestTelemetryExample(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, io.Discard, 1200*time.Millisecond, true); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"== worker-0", "== worker-2", "lease.acquire.duration", "{outcome=success}",
		"lease.renewals", "lease.losses                 {cause=unavailable}                      1", "lease.state_changes", "lease.run", "lease.acquire ",
		`"Name":"lease.backend.duration"`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "report") || strings.Contains(s, "billing") {
		t.Errorf("output names a key:\n%s", s)
	}
}
