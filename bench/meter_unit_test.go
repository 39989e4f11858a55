package bench

import (
	"os"
	"strconv"
	"testing"
	"time"
)

func TestParseRedisInfo(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_sys_main_thread:7.000000\r\n\r\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=300,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=40,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_fcall:calls=3,usec=60,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=2,usec=250,usec_per_call=125.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=5,usec=5000,usec_per_call=1000.00,rejected_calls=0,failed_calls=0\r\n"
	got := parseRedisInfo(info)
	want := serverSample{cpu: 3750*time.Millisecond - 250*time.Microsecond, script: 400 * time.Microsecond, ok: true, hasScr: true}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if got := parseRedisInfo("# CPU\r\n"); got.ok || got.hasScr {
		t.Fatalf("empty INFO: got %+v, want nothing known", got)
	}
}

func TestProcStatFields(t *testing.T) {
	st, ok := procStat(os.Getpid())
	if !ok {
		t.Skip("no /proc")
	}
	// Field 4 is the parent's pid; field 3 the state.
	if len(st) < 15 || st[1] != strconv.Itoa(os.Getppid()) {
		t.Fatalf("got %d fields, ppid field %q, want ppid %d", len(st), st[1], os.Getppid())
	}
	if procRun(os.Getpid(), st) < 0 {
		t.Fatal("negative CPU time")
	}
}
