package serveraudit_test

import (
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/internal/serveraudit"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// cleanLog: two keys; a is granted, renewed, released, granted again and
// left to expire, then granted a third time; b is granted.
func cleanLog() []serveraudit.Record {
	return []serveraudit.Record{
		{Seq: 1, Kind: serveraudit.Grant, Key: "n/a", Owner: "o1", Token: 1, Acquired: at(0), Expires: at(1000), At: at(0)},
		{Seq: 2, Kind: serveraudit.Grant, Key: "n/b", Owner: "o2", Token: 1, Acquired: at(10), Expires: at(1010), At: at(10)},
		{Seq: 3, Kind: serveraudit.Renew, Key: "n/a", Owner: "o1", Token: 1, Acquired: at(250), Expires: at(1250), At: at(250)},
		{Seq: 4, Kind: serveraudit.Release, Key: "n/a", Owner: "o1", Token: 1, Acquired: at(250), Expires: at(250), At: at(300)},
		{Seq: 5, Kind: serveraudit.Grant, Key: "n/a", Owner: "o3", Token: 2, Acquired: at(310), Expires: at(1310), At: at(310)},
		{Seq: 6, Kind: serveraudit.Grant, Key: "n/a", Owner: "o4", Token: 3, Acquired: at(1310), Expires: at(2310), At: at(1310)},
	}
}

func TestCheckCleanLog(t *testing.T) {
	l := &serveraudit.Log{Records: cleanLog()}
	if vs := l.Check(); len(vs) != 0 {
		t.Fatalf("clean log: %v", vs)
	}
}

// TestCheckCatchesDoctoredLogs: a checker that cannot fail proves nothing.
// Each row breaks the clean log in one way; Check must name the rule.
func TestCheckCatchesDoctoredLogs(t *testing.T) {
	tests := []struct {
		name   string
		doctor func(rs []serveraudit.Record) []serveraudit.Record
		rule   string
	}{
		{"token goes back", func(rs []serveraudit.Record) []serveraudit.Record { rs[5].Token = 2; return rs }, "token-order"},
		{"grant before the expiry of an unreleased grant", func(rs []serveraudit.Record) []serveraudit.Record {
			rs[5].Acquired = at(1309)
			return rs
		}, "early-grant"},
		{"grant while the previous one is renewed, not released", func(rs []serveraudit.Record) []serveraudit.Record {
			return append(rs[:3:3], rs[4:]...) // drop the release
		}, "early-grant"},
		{"renewal by another owner", func(rs []serveraudit.Record) []serveraudit.Record { rs[2].Owner = "o9"; return rs }, "foreign-renew"},
		{"renewal after the expiry", func(rs []serveraudit.Record) []serveraudit.Record {
			rs[2].Acquired, rs[2].Expires = at(1000), at(2000)
			return rs
		}, "expired-renew"},
		{"release of another grant", func(rs []serveraudit.Record) []serveraudit.Record { rs[3].Token = 7; return rs }, "foreign-release"},
		{"end of an empty hash", func(rs []serveraudit.Record) []serveraudit.Record {
			return append(rs, serveraudit.Record{Seq: 7, Kind: serveraudit.End, Key: "n/c"})
		}, "end-without-grant"},
		{"an unknown change", func(rs []serveraudit.Record) []serveraudit.Record {
			return append(rs, serveraudit.Record{Seq: 7, Kind: serveraudit.Unknown, Key: "n/a", Detail: "SET"})
		}, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &serveraudit.Log{Records: tt.doctor(cleanLog())}
			vs := l.Check()
			if len(vs) == 0 {
				t.Fatalf("got no violation, want %q", tt.rule)
			}
			if vs[0].Rule != tt.rule {
				t.Errorf("first violation %v, want %q (all: %v)", vs[0], tt.rule, vs)
			}
		})
	}
}

// calls are the client's side of cleanLog: a's first grant was acquired
// and renewed with the replies seen, its release was ambiguous; o3's
// acquisition was ambiguous (its grant is in the log); o5's was ambiguous
// and did not commit; b's and o4's were seen.
func calls() []serveraudit.Call {
	return []serveraudit.Call{
		{Client: "x", Op: serveraudit.OpAcquire, Key: "n/a", Owner: "o1", Token: 1, Sent: at(-1), Returned: at(1), Outcome: serveraudit.OK, Acquired: at(0), Expires: at(1000)},
		{Client: "y", Op: serveraudit.OpAcquire, Key: "n/b", Owner: "o2", Token: 1, Sent: at(9), Returned: at(11), Outcome: serveraudit.OK, Acquired: at(10), Expires: at(1010)},
		{Client: "x", Op: serveraudit.OpRenew, Key: "n/a", Owner: "o1", Token: 1, Sent: at(249), Returned: at(251), Outcome: serveraudit.OK, Acquired: at(250), Expires: at(1250)},
		{Client: "x", Op: serveraudit.OpRelease, Key: "n/a", Owner: "o1", Token: 1, Sent: at(299), Returned: at(400), Outcome: serveraudit.Ambiguous},
		{Client: "z", Op: serveraudit.OpAcquire, Key: "n/a", Owner: "o3", Sent: at(309), Returned: at(400), Outcome: serveraudit.Ambiguous},
		{Client: "z", Op: serveraudit.OpAcquire, Key: "n/a", Owner: "o5", Sent: at(500), Returned: at(600), Outcome: serveraudit.Ambiguous},
		{Client: "w", Op: serveraudit.OpAcquire, Key: "n/a", Owner: "o4", Token: 3, Sent: at(1309), Returned: at(1311), Outcome: serveraudit.OK, Acquired: at(1310), Expires: at(2310)},
	}
}

func TestMatchClean(t *testing.T) {
	rep := serveraudit.Match(&serveraudit.Log{Records: cleanLog()}, calls())
	if len(rep.Violations) != 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	if rep.Committed != 2 || rep.NotCommitted != 1 || rep.Undecided != 0 || rep.Successes != 4 {
		t.Errorf("got committed %d, not committed %d, undecided %d, successes %d; want 2, 1, 0, 4", rep.Committed, rep.NotCommitted, rep.Undecided, rep.Successes)
	}
	want := map[string]string{"o1": serveraudit.Committed, "o3": serveraudit.Committed, "o5": serveraudit.NotCommitted}
	for _, c := range rep.Calls {
		if c.Outcome == serveraudit.Ambiguous && c.Fate != want[c.Owner] {
			t.Errorf("%s's %s: fate %q, want %q", c.Owner, c.Op, c.Fate, want[c.Owner])
		}
	}
}

// TestMatchCatchesDoctoredLogs: the client's calls stay; the log is
// doctored (or a call is), and Match must name the rule.
func TestMatchCatchesDoctoredLogs(t *testing.T) {
	tests := []struct {
		name   string
		doctor func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call)
		rule   string
	}{
		{"a seen acquisition that never committed", func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call) {
			return rs[1:], cs
		}, "missing-success"},
		{"a seen renewal with another expiry", func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call) {
			rs[2].Expires = at(1251)
			return rs, cs
		}, "missing-success"},
		{"a seen release whose grant never ended", func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call) {
			cs[3].Outcome = serveraudit.OK
			return append(rs[:3:3], rs[5:]...), cs
		}, "missing-success"},
		{"a refused acquisition that committed", func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call) {
			cs[4].Outcome = serveraudit.Refused
			return rs, cs
		}, "unreported-commit"},
		{"a renewal nobody sent", func(rs []serveraudit.Record, cs []serveraudit.Call) ([]serveraudit.Record, []serveraudit.Call) {
			extra := serveraudit.Record{Seq: 10, Kind: serveraudit.Renew, Key: "n/b", Owner: "o2", Token: 1, Acquired: at(20), Expires: at(1020), At: at(20)}
			return append(rs, extra), cs
		}, "unreported-commit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, cs := tt.doctor(cleanLog(), calls())
			rep := serveraudit.Match(&serveraudit.Log{Records: rs}, cs)
			var rules []string
			found := false
			for _, v := range rep.Violations {
				rules = append(rules, v.Rule)
				found = found || v.Rule == tt.rule
			}
			if !found {
				t.Errorf("got %v, want %q", strings.Join(rules, ", "), tt.rule)
			}
		})
	}
}

// TestMatchValkeyEnd: a Valkey End settles an ambiguous release only when
// the file brackets it before the expiry (a release) or at or after the
// cleanup time (the cleanup); in between it is undecided.
func TestMatchValkeyEnd(t *testing.T) {
	for _, tt := range []struct {
		name                string
		notBefore, notAfter time.Time
		want                string
	}{
		{"before the expiry", at(300), at(320), serveraudit.Committed},
		{"after the cleanup time", at(1252), at(1400), serveraudit.NotCommitted},
		{"around the expiry", at(1200), at(1400), serveraudit.Undecided},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := cleanLog()[:4]
			rs[3] = serveraudit.Record{Seq: 4, Kind: serveraudit.End, Key: "n/a", NotBefore: tt.notBefore, NotAfter: tt.notAfter}
			rep := serveraudit.Match(&serveraudit.Log{Records: rs}, calls()[:4])
			if len(rep.Violations) != 0 {
				t.Fatalf("violations: %v", rep.Violations)
			}
			if got := rep.Calls[3].Fate; got != tt.want {
				t.Errorf("fate %q, want %q", got, tt.want)
			}
		})
	}
}

// TestMatchHeldBackRenewal: a renewal the server held back commits after
// a later renewal of the same grant, which succeeded; the late one is
// the ambiguous call's, not an unexplained commit.
func TestMatchHeldBackRenewal(t *testing.T) {
	rs := cleanLog()[:3]
	rs[2] = serveraudit.Record{Seq: 3, Kind: serveraudit.Renew, Key: "n/a", Owner: "o1", Token: 1, Acquired: at(300), Expires: at(1300), At: at(300)}
	rs = append(rs, serveraudit.Record{Seq: 4, Kind: serveraudit.Renew, Key: "n/a", Owner: "o1", Token: 1, Acquired: at(400), Expires: at(1400), At: at(400)})
	cs := calls()[:2]
	cs = append(cs,
		serveraudit.Call{Client: "x", Op: serveraudit.OpRenew, Key: "n/a", Owner: "o1", Token: 1, Sent: at(100), Returned: at(200), Outcome: serveraudit.Ambiguous},
		serveraudit.Call{Client: "x", Op: serveraudit.OpRenew, Key: "n/a", Owner: "o1", Token: 1, Sent: at(250), Returned: at(301), Outcome: serveraudit.OK, Acquired: at(300), Expires: at(1300)})
	rep := serveraudit.Match(&serveraudit.Log{Records: rs}, cs)
	if len(rep.Violations) != 0 {
		t.Fatalf("violations: %v", rep.Violations)
	}
	if rep.Calls[2].Fate != serveraudit.Committed {
		t.Errorf("held-back renewal: fate %q, want committed", rep.Calls[2].Fate)
	}
}
