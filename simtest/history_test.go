package simtest

import (
	"bytes"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasekit/lease/leaseapi"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCheckerCatches proves each rule of the checker can fail: a checker
// that cannot fail proves nothing.
func TestCheckerCatches(t *testing.T) {
	k := leaseapi.MustKey("h", "k")
	t0 := time.Unix(0, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name  string
		build func(h *History)
		want  string // "" = clean
	}{
		{"clean handoff", func(h *History) {
			h.Grant(k, "a", 1, at(0))
			h.Admit(k, "a", 1, at(1))
			h.Write("r", "a", 1, true, at(1))
			h.Grant(k, "b", 2, at(10))
			h.Admit(k, "b", 2, at(11))
			h.Write("r", "b", 2, true, at(11))
			h.Write("r", "a", 1, false, at(12))
		}, ""},
		{"overlap: old holder admitted after a newer grant", func(h *History) {
			h.Grant(k, "a", 1, at(0))
			h.Grant(k, "b", 2, at(5))
			h.Admit(k, "a", 1, at(6))
		}, "overlap"},
		{"overlap at the same instant", func(h *History) {
			h.Grant(k, "a", 1, at(0))
			h.Grant(k, "b", 2, at(5))
			h.Admit(k, "a", 1, at(5))
		}, "overlap"},
		{"handoff at the same instant", func(h *History) {
			h.Grant(k, "a", 1, at(0))
			h.Admit(k, "a", 1, at(5))
			h.Grant(k, "b", 2, at(5)) // a released, b acquired, same instant
			h.Admit(k, "b", 2, at(5))
		}, ""},
		{"token regression", func(h *History) {
			h.Grant(k, "a", 2, at(0))
			h.Grant(k, "b", 2, at(5))
		}, "grant-order"},
		{"admission without grant", func(h *History) {
			h.Admit(k, "a", 1, at(0))
		}, "ungranted"},
		{"admission before grant", func(h *History) {
			h.Admit(k, "a", 1, at(0))
			h.Grant(k, "a", 1, at(1))
		}, "ungranted"},
		{"stale write accepted", func(h *History) {
			h.Write("r", "b", 2, true, at(0))
			h.Write("r", "a", 1, true, at(1))
		}, "stale-write"},
		{"equal token from another owner", func(h *History) {
			h.Write("r", "b", 2, true, at(0))
			h.Write("r", "a", 2, true, at(1))
		}, "stale-write"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			tc.build(h)
			vs := h.Check()
			if tc.want == "" {
				if len(vs) != 0 {
					t.Fatalf("violations: got %v, want none", vs)
				}
				return
			}
			for _, v := range vs {
				if v.Rule == tc.want {
					return
				}
			}
			t.Fatalf("violations: got %v, want one of rule %q", vs, tc.want)
		})
	}
}

func TestResourceFence(t *testing.T) {
	h := NewHistory()
	r := NewResource("r", h)
	now := time.Unix(0, 0)
	if err := r.Write("a", 1, "x", now); err != nil {
		t.Fatal(err)
	}
	if err := r.Write("b", 2, "y", now); err != nil {
		t.Fatal(err)
	}
	if err := r.Write("a", 1, "z", now); leaseapi.Kind(err) != leaseapi.ErrStaleOwner {
		t.Fatalf("stale write: got %v, want ErrStaleOwner", err)
	}
	if err := r.Write("c", 2, "z", now); leaseapi.Kind(err) != leaseapi.ErrStaleOwner {
		t.Fatalf("equal token from another owner: got %v, want ErrStaleOwner", err)
	}
	if v, tok, n := r.Value(); v != "y" || tok != 2 || n != 2 {
		t.Fatalf("Value: got (%q, %d, %d), want (y, 2, 2)", v, tok, n)
	}
	if vs := h.Check(); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	var buf bytes.Buffer
	if err := h.WriteJSON(&buf); err != nil || !bytes.Contains(buf.Bytes(), []byte(`"kind": "wrote"`)) {
		t.Fatalf("WriteJSON: %v %s", err, buf.String())
	}
}

func TestSkewedClock(t *testing.T) {
	Simulate(t, func(t *testing.T) {
		c := NewSkewedClock(nil, time.Second, 2)
		start := c.Now()
		Advance(time.Second)
		if got := c.Now().Sub(start); got != 2*time.Second {
			t.Fatalf("rate 2 clock advanced %v in 1s, want 2s", got)
		}
	})
}

func TestOffsetClock(t *testing.T) {
	Simulate(t, func(t *testing.T) {
		c := NewOffsetClock(nil, time.Hour)
		if got := c.Until(time.Now().Add(2 * time.Hour)); got != time.Hour {
			t.Fatalf("Until: got %v, want 1h", got)
		}
		start := c.Now()
		timer := c.Timer(time.Second)
		<-timer.C
		if got := c.Since(start); got != time.Second {
			t.Fatalf("a 1s timer on an offset clock took %v", got)
		}
		ctx, cancel := c.WithDeadline(t.Context(), c.Now().Add(time.Second))
		defer cancel()
		<-ctx.Done()
		if got := c.Since(start); got != 2*time.Second {
			t.Fatalf("deadline context ended after %v, want 2s", got)
		}
	})
}
