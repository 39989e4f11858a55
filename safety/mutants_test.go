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

// TestMutantsAreCaught proves the checks can fail: it builds this package
// once with the leasemutant tag (go test -c -tags leasemutant), runs the
// simulation scenarios once with no mutant active (they must pass: the
// failures below come from the mutants, not from the tag) and then once
// per name in mutant.All with LEASE_MUTANT set and LEASE_SAFETY_SEEDS=30;
// each run must fail in at least one scenario. It does the same with the
// postgres package's fence and flush tests (real server) and
// mutant.Postgres, which the simulation cannot see. The tests that caught each mutant are logged.
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
	for _, suite := range []mutationSuite{
		{name: "the simulation tier", pkg: ".", run: mutantScenarios, mutants: mutant.All},
		// The postgres package starts its own server (or uses
		// LEASE_TEST_POSTGRES_URL), as in every run of its tests.
		{name: "the postgres fence and flush tests", pkg: "../backend/postgres", run: "^(TestFence|TestOnlyGrantsWaitForTheFlush)", mutants: mutant.Postgres},
	} {
		suite.check(ctx, t)
	}
	t.Logf("mutation checks took %v", time.Since(start).Round(time.Millisecond))
}

// mutationSuite is one package's tests (run) built with the leasemutant
// tag: a control run with no mutant must pass, and a run with each of
// mutants must fail in at least one test.
type mutationSuite struct {
	name, pkg, run string
	mutants        []string
}

func (m mutationSuite) check(ctx context.Context, t *testing.T) {
	t.Helper()
	begin := time.Now()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	pkgDir, err := filepath.Abs(m.pkg)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "mutant.test")
	build := exec.CommandContext(ctx, goBin, "test", "-c", "-tags", "leasemutant", "-o", bin, ".")
	build.Dir = pkgDir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: go test -c -tags leasemutant: %v\n%s", m.name, err, out)
	}
	t.Logf("%s: built in %v", m.name, time.Since(begin).Round(time.Millisecond))

	run := func(name string) (failed []string, out string, err error) {
		cmd := exec.CommandContext(ctx, bin, "-test.run", m.run, "-test.count=1", "-test.v")
		cmd.Dir = pkgDir
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
		for _, f := range failRE.FindAllStringSubmatch(string(b), -1) {
			if !seen[f[1]] {
				seen[f[1]] = true
				failed = append(failed, f[1])
			}
		}
		return failed, string(b), err
	}

	begin = time.Now()
	failed, out, err := run("")
	if err != nil || len(failed) > 0 {
		t.Fatalf("%s: control run (leasemutant tag, no mutant): %v, failed %v\n%s", m.name, err, failed, tail(out, 40))
	}
	if !strings.Contains(out, "--- PASS") && strings.Contains(out, "--- SKIP") {
		// No server and LEASE_REQUIRE_BACKENDS unset: the package's own
		// tests skip, so its mutants cannot be judged here either.
		t.Logf("%s: skipped (its tests skip without a server)\n%s", m.name, tail(out, 10))
		return
	}
	t.Logf("%s: control run passed in %v", m.name, time.Since(begin).Round(time.Millisecond))
	for _, name := range m.mutants {
		begin := time.Now()
		failed, out, err := run(name)
		if err == nil || len(failed) == 0 {
			t.Errorf("mutant %s survived %s (exit %v)\n%s", name, m.name, err, tail(out, 20))
			continue
		}
		t.Logf("mutant %-26s caught by %s (%v)", name, strings.Join(failed, ", "), time.Since(begin).Round(time.Millisecond))
	}
}

// failRE matches a failed top-level test in go test output.
var failRE = regexp.MustCompile(`(?m)^--- FAIL: (Test[A-Za-z/]*)`)

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
