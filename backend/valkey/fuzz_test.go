package valkey

// Fuzz targets for the decoding of script replies and for the key escaping.
// They test unexported functions, so they live in the package itself, as
// export_test.go does (every other test is in valkey_test). The seeds run
// with every go test; the long tier runs, for instance:
//
//	go test -run '^$' -fuzz '^FuzzGrant$' -fuzztime 30s ./backend/valkey

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// FuzzGrant feeds grant, which turns the integers of a script's reply
// ({status, token, acquired, expires}; TryAcquire, Renew and Inspect all
// go through it) into a record, replies of any length and content, as a
// broken or hostile server could send. It must never panic, and a reply it
// accepts must give a valid record with the reply's token and instants,
// and ExpiresAt after AcquiredAt.
func FuzzGrant(f *testing.F) {
	now := time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC).UnixMicro()
	for _, s := range []struct {
		n                                    uint8
		status, token, acquired, expires, x5 int64
	}{
		{4, statusOK, 1, now, now + 1e6, 0},                              // a one-second grant
		{4, statusOK, math.MaxInt64, now, now + 1, 0},                    // the last token
		{4, statusOK, 7, now, now, 0},                                    // a zero TTL
		{4, statusOK, 0, now, now + 1e6, 0},                              // token 0
		{4, statusOK, -1, now, now + 1e6, 0},                             // a negative token
		{1, statusContended, 0, 0, 0, 0},                                 // TryAcquire: held
		{2, statusFree, 9, 0, 0, 0},                                      // Inspect: free at token 9
		{5, statusOK, 3, now, now + 1e6, 42},                             // one value too many
		{3, statusOK, 3, now, 0, 0},                                      // one value short
		{0, 0, 0, 0, 0, 0},                                               // an empty reply
		{4, statusOK, 1, math.MinInt64, math.MaxInt64, 0},                // the widest span
		{4, statusOK, 1, math.MaxInt64, math.MaxInt64, 0},                // far future
		{4, statusStale, 1, -now, -now + 1, 0},                           // before the epoch
		{4, statusOK, 1, now + 1e6, now, 0},                              // expires before acquired
		{4, statusOK, 1, math.MaxInt64, math.MinInt64, 0},                // and by ~5.8e5 years
		{4, statusOK, 1, 1e16, 0, 0},                                     // by 317 years
		{4, statusOK, 1, now, now + leaseapi.MaxTTL.Microseconds(), 0},   // the longest TTL
		{4, statusOK, 1, now, now + 2*leaseapi.MaxTTL.Microseconds(), 0}, // past it
	} {
		f.Add(s.n, s.status, s.token, s.acquired, s.expires, s.x5)
	}
	key := leaseapi.MustKey("fuzz", "grant")
	const owner = "fuzz-owner"
	f.Fuzz(func(t *testing.T, n uint8, status, token, acquired, expires, x5 int64) {
		all := []int64{status, token, acquired, expires, x5}
		vals := all[:int(n)%(len(all)+1)]
		rec, ok := leaseapi.Record{}, false
		if len(vals) == 4 {
			rec, ok = grant(key, owner, vals[1], vals[2], vals[3])
		}
		if !ok {
			if rec != (leaseapi.Record{}) {
				t.Errorf("grant(%v) refused the reply but returned %+v", vals, rec)
			}
			return
		}
		if len(vals) != 4 {
			t.Errorf("grant accepted a reply of %d values: %v", len(vals), vals)
		}
		if err := rec.Check(); err != nil {
			t.Errorf("grant(%v) accepted an invalid record: %v", vals, err)
		}
		if rec.Key != key || rec.Owner != owner || int64(rec.Token) != token {
			t.Errorf("grant(%v): key %v owner %q token %d, want %v %q %d", vals, rec.Key, rec.Owner, rec.Token, key, owner, token)
		}
		if !rec.AcquiredAt.Equal(time.UnixMicro(acquired)) || !rec.ExpiresAt.Equal(time.UnixMicro(expires)) {
			t.Errorf("grant(%v): acquired %v expires %v, not the reply's instants", vals, rec.AcquiredAt, rec.ExpiresAt)
		}
		if !rec.ExpiresAt.After(rec.AcquiredAt) {
			// grant must reject an interval that does not end after it
			// starts (past ~292 years of span, LocalDeadline once wrapped
			// around and handed out a 292-year Active handle).
			t.Errorf("grant(%v) accepted ExpiresAt %v not after AcquiredAt %v", vals, rec.ExpiresAt, rec.AcquiredAt)
		}
	})
}

// FuzzEscape checks the escaping of key text inside the hash tag: the
// result holds no '{', '}' or ':' (so neither the tag nor the prefix
// separator can be forged by a key), and it decodes back to the input (so
// the mapping is injective and two keys never share a tag).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a", "ns", "a/b/c", "{x}", "a:b", "%", "%25", "%7B", "}{", "::", "é{%}:", "\x00", "%%%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escape(s)
		if strings.ContainsAny(e, "{}:") {
			t.Errorf("escape(%q) = %q keeps a '{', '}' or ':'", s, e)
		}
		if d, ok := unescape(e); !ok || d != s {
			t.Errorf("escape(%q) = %q decodes to %q (ok %v)", s, e, d, ok)
		}
		if !strings.ContainsAny(s, "%{}:") && e != s {
			t.Errorf("escape(%q) = %q changed text that needs no escaping", s, e)
		}
	})
}

// unescape reverses escape, reporting false for text escape cannot produce.
func unescape(e string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		c := e[i]
		switch {
		case c == '{' || c == '}' || c == ':':
			return "", false
		case c != '%':
			b.WriteByte(c)
			continue
		case i+2 >= len(e):
			return "", false
		}
		switch e[i+1 : i+3] {
		case "25":
			b.WriteByte('%')
		case "7B":
			b.WriteByte('{')
		case "7D":
			b.WriteByte('}')
		case "3A":
			b.WriteByte(':')
		default:
			return "", false
		}
		i += 2
	}
	return b.String(), true
}
