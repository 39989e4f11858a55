package safety_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/mutant"
)

// mutantSeeds is the seeds per scenario of a mutation run
// (LEASE_SAFETY_SEEDS): every mutant must be caught within them.
const mutantSeeds = "30"

// mutantScenarios selects the simulation tier.
const mutantScenarios = "^TestSim"

// TestMutantsAreCaught proves the simulation tier can fail: it builds this
// package once with the leasemutant tag (go test -c -tags leasemutant),
// runs the simulation scenarios once with no mutant active (they must
// pass: the failures below come from the mutants, not from the tag) and
// then once per name in mutant.All with LEASE_MUTANT set and
// LEASE_SAFETY_SEEDS=30; each run must fail in at least one scenario. The
// scenarios that caught each mutant are logged.
func TestMutantsAreCaught(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package and runs the simulation tier once per mutant")
	}
	if os.Getenv("LEASE_MUTANT") != "" {
		t.Skip("this is already a mutation run")
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "safety-mutant.test")
	build := exec.CommandContext(ctx, goBin, "test", "-c", "-tags", "leasemutant", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags leasemutant: %v\n%s", err, out)
	}
	t.Logf("built in %v", time.Since(start).Round(time.Millisecond))

	run := func(name string) (failed []string, out string, err error) {
		cmd := exec.CommandContext(ctx, bin, "-test.run", mutantScenarios, "-test.count=1")
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
			for _, k := range []string{"LEASE_MUTANT=", envSeed + "=", envSeeds + "=", envLong + "=", envArtifacts + "="} {
				if strings.HasPrefix(kv, k) {
					return true
				}
			}
			return false
		})
		cmd.Env = append(env, "LEASE_MUTANT="+name, envSeeds+"="+mutantSeeds, envArtifacts+"="+t.TempDir())
		b, err := cmd.CombinedOutput()
		seen := map[string]bool{}
		for _, m := range failRE.FindAllStringSubmatch(string(b), -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				failed = append(failed, m[1])
			}
		}
		return failed, string(b), err
	}

	begin := time.Now()
	if failed, out, err := run(""); err != nil || len(failed) > 0 {
		t.Fatalf("control run (leasemutant tag, no mutant): %v, failed %v\n%s", err, failed, tail(out, 40))
	}
	t.Logf("control run passed in %v", time.Since(begin).Round(time.Millisecond))
	for _, name := range mutant.All {
		begin := time.Now()
		failed, out, err := run(name)
		if err == nil || len(failed) == 0 {
			t.Errorf("mutant %s survived the simulation tier (exit %v)\n%s", name, err, tail(out, 20))
			continue
		}
		t.Logf("mutant %-26s caught by %s (%v)", name, strings.Join(failed, ", "), time.Since(begin).Round(time.Millisecond))
	}
	t.Logf("mutation checks took %v", time.Since(start).Round(time.Millisecond))
}

// failRE matches a failed top-level scenario in go test output.
var failRE = regexp.MustCompile(`(?m)^--- FAIL: (TestSim[A-Za-z/]*)`)

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
