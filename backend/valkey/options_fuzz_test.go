package valkey_test

import (
	"math"
	"strings"
	"testing"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/leasekit/lease/backend/valkey"
	"github.com/leasekit/lease/internal/backendtest"
	"github.com/leasekit/lease/leaseapi"
)

// idleClient is a valkey-go client that must never be called: New only
// keeps it (a call would panic on the nil interface, failing the target).
type idleClient struct{ vk.Client }

// FuzzOptions feeds New any Options. Nothing may panic. Options are
// accepted exactly when they obey the documented rules: the prefix
// (DefaultPrefix when empty) is 1 to MaxPrefixBytes printable ASCII bytes
// without a brace, WaitReplicas is not negative and WaitTimeout
// (DefaultWaitTimeout when zero) is between 1ms and
// leaseapi.MaxOperationTimeout. An accepted Store keeps exactly those
// values, its release channel is "prefix:released" and its keys start
// with "prefix:{". A rejection is ErrInvalidState only, and never carries
// the prefix. The seeds run with every go test; the long tier runs, for
// instance:
//
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 30s ./backend/valkey
func FuzzOptions(f *testing.F) {
	ms := int64(time.Millisecond)
	for _, s := range []struct {
		prefix   string
		replicas int
		timeout  int64
	}{
		{"", 0, 0},
		{"lease", 1, 0},
		{"app:leases", 2, 250 * ms},
		{"a", 0, ms},
		{"a", 0, ms - 1},
		{"a", 0, -1},
		{"a", 0, int64(leaseapi.MaxOperationTimeout)},
		{"a", 0, int64(leaseapi.MaxOperationTimeout) + 1},
		{"a", 0, math.MinInt64},
		{"a", 0, math.MaxInt64},
		{"a", -1, 0},
		{"a", math.MinInt, 0},
		{"a", math.MaxInt, 0},
		{strings.Repeat("p", valkey.MaxPrefixBytes), 0, 0},
		{strings.Repeat("p", valkey.MaxPrefixBytes+1), 0, 0},
		{"app*", 0, 0}, {"a?b", 0, 0}, {"a[b]", 0, 0}, {`a\b`, 0, 0},
		{"{tag}", 0, 0},
		{"a}b", 0, 0},
		{"a b", 0, 0},
		{"a\x00b", 0, 0},
		{"\x7f", 0, 0},
		{"naïve", 0, 0},
		{"*?[]\\", 0, 0},
		{"!~", 0, 0},
	} {
		f.Add(s.prefix, s.replicas, s.timeout)
	}
	key := leaseapi.MustKey("fuzz", "k")
	var fixed []string
	for _, o := range []valkey.Options{{Prefix: " "}, {WaitReplicas: -1}, {WaitTimeout: -1}} {
		_, err := valkey.New(idleClient{}, o)
		fixed = append(fixed, backendtest.Messages(err)...)
	}
	f.Fuzz(func(t *testing.T, prefix string, replicas int, timeout int64) {
		o := valkey.Options{Prefix: prefix, WaitReplicas: replicas, WaitTimeout: time.Duration(timeout)}
		p, wt := prefix, o.WaitTimeout
		if p == "" {
			p = valkey.DefaultPrefix
		}
		if wt == 0 {
			wt = valkey.DefaultWaitTimeout
		}
		valid := goodPrefix(p) && replicas >= 0 && wt >= time.Millisecond && wt <= leaseapi.MaxOperationTimeout

		s, err := valkey.New(idleClient{}, o)
		if !valid {
			if s != nil {
				t.Fatalf("New(%+v) returned a store with error %v", o, err)
			}
			backendtest.WantRejected(t, "New", err, fixed, prefix)
			return
		}
		if err != nil || s == nil {
			t.Fatalf("New(%+v): %v, want a store (the options obey the rules)", o, err)
		}
		gp, ch, gr, gwt := valkey.Settings(s)
		if gp != p || ch != p+":released" || gr != replicas || gwt != wt {
			t.Fatalf("New(%+v) kept prefix %q channel %q replicas %d timeout %v, want %q %q %d %v", o, gp, ch, gr, gwt, p, p+":released", replicas, wt)
		}
		lease, token := s.Keys(key)
		if lease != p+":{fuzz/k}:lease" || token != p+":{fuzz/k}:token" {
			t.Fatalf("New(%+v): keys %q and %q, want them under %q", o, lease, token, p+":{")
		}
	})
}

// goodPrefix is the documented prefix rule, written out.
func goodPrefix(p string) bool {
	if len(p) == 0 || len(p) > valkey.MaxPrefixBytes {
		return false
	}
	for _, c := range []byte(p) {
		if c < 0x21 || c > 0x7e || strings.ContainsRune("{}*?[]\\", rune(c)) {
			return false
		}
	}
	return true
}
