package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/valkey-io/valkey-go"
)

// serverSample is a reading of the server's cumulative CPU time.
type serverSample struct {
	cpu    time.Duration // the server's CPU time, minus what reading it cost (Redis)
	script time.Duration // Redis: the time spent in EVAL, EVALSHA and FCALL
	ok     bool          // cpu is known
	hasScr bool          // script is known
}

// serverMeter reads a server's cumulative CPU time; nil when it cannot.
type serverMeter func(ctx context.Context) (serverSample, error)

// redisMeter reads INFO cpu and commandstats through its own client. The
// server CPU subtracts the INFO commands' own usec, so that reading the
// meter twice per slice is not counted as the workload's.
func redisMeter(c valkey.Client) serverMeter {
	return func(ctx context.Context) (serverSample, error) {
		info, err := c.Do(ctx, c.B().Info().Section("cpu", "commandstats").Build()).ToString()
		if err != nil {
			return serverSample{}, err
		}
		return parseRedisInfo(info), nil
	}
}

// parseRedisInfo extracts used_cpu_sys + used_cpu_user (seconds) minus
// cmdstat_info's usec, and the usec of cmdstat_eval, cmdstat_evalsha and
// cmdstat_fcall (the Store runs its scripts as functions).
func parseRedisInfo(info string) serverSample {
	var s serverSample
	var cpu float64
	var infoUsec, scriptUsec int64
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			v, err := strconv.ParseFloat(val, 64)
			if err == nil {
				cpu += v
				s.ok = true
			}
		case "cmdstat_info":
			infoUsec = statUsec(val)
		case "cmdstat_eval", "cmdstat_evalsha", "cmdstat_fcall":
			scriptUsec += statUsec(val)
			s.hasScr = true
		}
	}
	s.cpu = time.Duration(cpu*float64(time.Second)) - time.Duration(infoUsec)*time.Microsecond
	s.script = time.Duration(scriptUsec) * time.Microsecond
	return s
}

// statUsec reads usec=N out of "calls=1,usec=2,usec_per_call=2.00,...".
func statUsec(v string) int64 {
	for f := range strings.SplitSeq(v, ",") {
		if n, ok := strings.CutPrefix(f, "usec="); ok {
			u, _ := strconv.ParseInt(n, 10, 64)
			return u
		}
	}
	return 0
}

// postgresMeter sums the CPU time of a private PostgreSQL server: the
// postmaster (its pid from dataDir/postmaster.pid), every process it
// started that is still running, and the children it has reaped. It reads
// /proc only, so the server does no work for it.
func postgresMeter(dataDir string) serverMeter {
	return func(context.Context) (serverSample, error) {
		b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
		if err != nil {
			return serverSample{}, err
		}
		first, _, _ := strings.Cut(string(b), "\n")
		pm, err := strconv.Atoi(strings.TrimSpace(first))
		if err != nil {
			return serverSample{}, fmt.Errorf("bench: postmaster.pid: %w", err)
		}
		st, ok := procStat(pm)
		if !ok {
			return serverSample{}, fmt.Errorf("bench: no /proc entry for the postmaster")
		}
		total := procRun(pm, st) + ticks(st, 16) + ticks(st, 17) // own time + reaped children (cutime, cstime)
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return serverSample{}, err
		}
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == pm {
				continue
			}
			if cst, ok := procStat(pid); ok && len(cst) > 1 && cst[1] == strconv.Itoa(pm) {
				total += procRun(pid, cst)
			}
		}
		return serverSample{cpu: total, ok: true}, nil
	}
}

// procStat returns the fields of /proc/pid/stat after the command name
// (field 3, the state, is [0]).
func procStat(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

// clockTick is the kernel's USER_HZ, 100 on every Linux this runs on.
const clockTick = 10 * time.Millisecond

// ticks returns field f (1-based, as proc(5) numbers them) of a stat
// split by procStat, in clock ticks, as a duration.
func ticks(st []string, f int) time.Duration {
	i := f - 3
	if i < 0 || i >= len(st) {
		return 0
	}
	n, _ := strconv.ParseInt(st[i], 10, 64)
	return time.Duration(n) * clockTick
}

// procRun is pid's CPU time: /proc/pid/schedstat's nanoseconds when
// readable, else utime+stime in clock ticks.
func procRun(pid int, st []string) time.Duration {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	return ticks(st, 14) + ticks(st, 15)
}

// cpuTime is this process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// tally accumulates one variant's slices over the rounds of one run.
type tally struct {
	ops            int64
	wall, cpu      time.Duration
	srv, script    time.Duration
	srvOK, scrOK   bool
	mallocs, bytes uint64

	lat  []time.Duration // seq: pair latencies
	errs errCount        // failed operations

	// handoff
	hand    []time.Duration // release returned -> next holder's acquire returned
	waitMax time.Duration   // the longest wait, including waits a slice cut short
	calls   int64           // managed: backend calls the renewals took
}

// meter measures slices: the client's CPU, allocations and wall time over
// exactly the slice, and the server's CPU read outside that window (so
// that reading it costs the client nothing that is counted).
type meter struct {
	server serverMeter // nil: unknown
}

type clientSample struct {
	at             time.Time
	cpu            time.Duration
	mallocs, bytes uint64
}

func (m meter) client() clientSample {
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return clientSample{cpu: cpuTime(), mallocs: ms.Mallocs, bytes: ms.TotalAlloc, at: time.Now()}
}

func (m meter) serverNow(ctx context.Context) (serverSample, bool) {
	if m.server == nil {
		return serverSample{}, false
	}
	s, err := m.server(ctx)
	return s, err == nil && s.ok
}

// measure runs one slice, which reports how many operations it did, and
// adds the slice to t.
func (m meter) measure(ctx context.Context, t *tally, slice func() (int64, error)) error {
	s0, sok0 := m.serverNow(ctx)
	c0 := m.client()
	n, err := slice()
	end := time.Now()
	cpu := cpuTime()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	s1, sok1 := m.serverNow(ctx)
	if err != nil {
		return err
	}
	t.ops += n
	t.wall += end.Sub(c0.at)
	t.cpu += cpu - c0.cpu
	t.mallocs += ms.Mallocs - c0.mallocs
	t.bytes += ms.TotalAlloc - c0.bytes
	if sok0 && sok1 {
		t.srv += s1.cpu - s0.cpu
		t.srvOK = true
		if s0.hasScr || s1.hasScr {
			t.script += s1.script - s0.script
			t.scrOK = true
		}
	}
	return nil
}

func (t *tally) rate() float64 {
	if t.wall <= 0 {
		return 0
	}
	return float64(t.ops) / t.wall.Seconds()
}

// p50 sorts d and returns its median.
func p50(d []time.Duration) time.Duration {
	slices.Sort(d)
	return d[len(d)/2]
}

func perOp(d time.Duration, ops int64) float64 {
	return float64(d.Nanoseconds()) / 1e3 / float64(max(ops, 1))
}

// report reports one variant's figures; unit names the operation ("pair",
// "renewal", "acq") and units its plural ("pairs", "renewals", "acq").
func (t *tally) report(b bench, name, unit, units string) {
	if e := t.errs.n.Load(); e > 0 {
		b.ReportMetric(float64(e), name+"-failed-"+units)
		b.Logf("%s: %d %s failed, the first: %v", name, e, units, t.errs.first.get())
	}
	b.ReportMetric(t.rate(), name+"-"+units+"/s")
	b.ReportMetric(perOp(t.cpu, t.ops), name+"-client-us/"+unit)
	if t.srvOK {
		b.ReportMetric(perOp(t.srv, t.ops), name+"-server-us/"+unit)
	}
	if t.scrOK {
		b.ReportMetric(perOp(t.script, t.ops), name+"-script-us/"+unit)
	}
	b.ReportMetric(float64(t.mallocs)/float64(max(t.ops, 1)), name+"-allocs/"+unit)
	if len(t.lat) > 0 {
		var sum time.Duration
		for _, d := range t.lat {
			sum += d
		}
		b.ReportMetric(float64(p50(t.lat).Nanoseconds())/1e3, name+"-p50-us")
		b.ReportMetric(float64(sum.Nanoseconds())/1e3/float64(len(t.lat)), name+"-mean-us")
	}
	if len(t.hand) > 0 {
		b.ReportMetric(float64(p50(t.hand).Nanoseconds())/1e3, name+"-handoff-p50-us")
	}
	if t.waitMax > 0 {
		b.ReportMetric(float64(t.waitMax.Nanoseconds())/1e6, name+"-wait-max-ms")
	}
	if t.calls > 0 {
		b.ReportMetric(float64(t.ops)/float64(t.calls), name+"-renewals/call")
	}
}

// check fails a layer whose operations failed more often than they
// succeeded: that is a broken layer, not a loaded machine.
func (t *tally) check(name string) error {
	if e := t.errs.n.Load(); e > t.ops {
		return fmt.Errorf("%s: %d of %d operations failed, the first: %w", name, e, e+t.ops, t.errs.first.get())
	}
	return nil
}

// ratio reports num's rate over den's as "num/den".
func ratio(b bench, tallies map[string]*tally, num, den string) {
	ratioAs(b, tallies, num, den, num+"/"+den)
}

func ratioAs(b bench, tallies map[string]*tally, num, den, unit string) {
	n, d := tallies[num], tallies[den]
	if n == nil || d == nil || d.rate() == 0 {
		return
	}
	b.ReportMetric(n.rate()/d.rate(), unit)
}
