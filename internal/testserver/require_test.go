package testserver

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestSkipReason(t *testing.T) {
	t.Setenv("LEASE_REQUIRE_BACKENDS", "")
	if got := SkipReason("valkey", EnvValkeyAddr, nil); got != "" {
		t.Errorf("SkipReason(nil) = %q; want empty", got)
	}
	got := SkipReason("valkey", EnvValkeyAddr, ErrNoServer)
	if !strings.Contains(got, "valkey") || !strings.Contains(got, EnvValkeyAddr) {
		t.Errorf("SkipReason = %q; want it to name valkey and %s", got, EnvValkeyAddr)
	}
}

// TestSkipReasonExitsWhenRequired runs this test binary again with
// LEASE_REQUIRE_BACKENDS=1 and checks that SkipReason makes it exit 1.
func TestSkipReasonExitsWhenRequired(t *testing.T) {
	if os.Getenv("TESTSERVER_CHILD") == "1" {
		SkipReason("postgres", EnvPostgresURL, ErrNoServer)
		return // not reached: the exit status tells the parent
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSkipReasonExitsWhenRequired$")
	cmd.Env = append(os.Environ(), "TESTSERVER_CHILD=1", "LEASE_REQUIRE_BACKENDS=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("child: %v; want exit status 1\n%s", err, out)
	}
	if !strings.Contains(string(out), EnvPostgresURL) {
		t.Errorf("child output %q does not name %s", out, EnvPostgresURL)
	}
}
