package serveraudit

import (
	"fmt"
	"sort"
	"time"
)

// Slack is how far apart the client's and the server's readings of the
// one wall clock they share may be (rounding to microseconds, the order
// in which the two sides read the clock).
const Slack = 2 * time.Millisecond

// Op is the backend operation of a Call.
type Op string

// Operations Match knows; reads are not matched.
const (
	OpAcquire Op = "acquire"
	OpRenew   Op = "renew"
	OpRelease Op = "release"
)

// Outcome is what the caller of a backend operation was told.
type Outcome string

// Outcomes of a Call.
const (
	// OK: the operation succeeded. For OpAcquire and OpRenew the call's
	// Acquired and Expires are the record the caller got back.
	OK Outcome = "ok"
	// Ambiguous: ErrAmbiguousOutcome, the reply was lost.
	Ambiguous Outcome = "ambiguous"
	// Refused: a definite answer that nothing changed (ErrContended,
	// ErrStaleOwner, ErrBackendUnavailable: failed before it was sent...).
	Refused Outcome = "refused"
)

// Call is one backend call as its caller saw it.
type Call struct {
	Client string `json:"client"`
	Op     Op     `json:"op"`
	Key    string `json:"key"`
	Owner  string `json:"owner"`
	// Token: of the grant renewed or released; for OpAcquire, the token
	// the caller got (OK only).
	Token    uint64    `json:"token,omitempty"`
	Sent     time.Time `json:"sent"`
	Returned time.Time `json:"returned"`
	Outcome  Outcome   `json:"outcome"`
	// Err is the sentinel's text for a failure, for the dump.
	Err      string    `json:"err,omitempty"`
	Acquired time.Time `json:"acquired,omitzero"`
	Expires  time.Time `json:"expires,omitzero"`
	// Fate is Match's verdict on an Ambiguous call: "committed",
	// "not-committed" or "undecided" (a Valkey release the file cannot
	// tell from the grant's expiry).
	Fate string `json:"fate,omitempty"`
}

// Verdicts of Match on an ambiguous call.
const (
	Committed    = "committed"
	NotCommitted = "not-committed"
	Undecided    = "undecided"
)

// Report is Match's result.
type Report struct {
	// Calls are the calls given to Match, each Ambiguous one with its Fate.
	Calls []Call `json:"calls"`
	// Committed, NotCommitted and Undecided count the ambiguous calls by
	// verdict; Successes the OK mutations found in the log.
	Committed, NotCommitted, Undecided, Successes int
	Violations                                    []Violation `json:"violations,omitempty"`
}

// Match is checker C4 against the server's log. Every mutation the server
// committed must come from a call, and:
//
//   - "missing-success": an OK acquisition (owner, token, acquired,
//     expires) or renewal (the record it returned) is in the log exactly;
//     an OK release's grant is released or ended in the log;
//   - "unreported-commit": a grant or renewal in the log that no OK or
//     Ambiguous call can explain (a Refused call that committed, or a
//     change nobody sent);
//   - every Ambiguous call gets a Fate: an acquisition committed iff its
//     owner id (fresh per acquisition) was granted; a renewal or release
//     committed iff a renewal or release of its grant, not claimed by an
//     OK call, was applied no earlier than the call's send (minus Slack):
//     each unclaimed renewal goes to the latest ambiguous renewal call
//     sent before it that no other renewal took (a call runs at most
//     once); a release record goes to the latest release call sent before
//     it (an OK one, when that is later: release is idempotent).
//
// A Valkey End settles a release only when the file proves what it was: a
// record before the grant's expiry is a release; one no earlier than the
// server's cleanup time (the PEXPIREAT the acquisition set, which is past
// the expiry) is the cleanup. Anything in between is Undecided.
func Match(l *Log, calls []Call) Report {
	rep := Report{Calls: append([]Call(nil), calls...)}
	type grantKey struct {
		key, owner string
		token      uint64
	}
	// The log, per grant: its grant record, renewals, and how it ended.
	type grantInfo struct {
		grant   *Record
		renews  []*Record
		end     *Record      // Release or End
		expires time.Time    // at its end (last renewal)
		claimed map[int]bool // records a call accounts for, by Seq
	}
	grants := map[grantKey]*grantInfo{}
	byOwner := map[[2]string]*grantInfo{} // key, owner → grant
	current := map[string]grantKey{}
	for i := range l.Records {
		r := &l.Records[i]
		switch r.Kind {
		case Grant:
			g := &grantInfo{grant: r, expires: r.Expires, claimed: map[int]bool{}}
			gk := grantKey{r.Key, r.Owner, r.Token}
			grants[gk] = g
			byOwner[[2]string{r.Key, r.Owner}] = g
			current[r.Key] = gk
		case Renew:
			if g := grants[grantKey{r.Key, r.Owner, r.Token}]; g != nil {
				g.renews = append(g.renews, r)
				g.expires = r.Expires
			}
		case Release:
			if g := grants[grantKey{r.Key, r.Owner, r.Token}]; g != nil && g.end == nil {
				g.end = r
			}
		case End:
			if gk, ok := current[r.Key]; ok {
				if g := grants[gk]; g.end == nil {
					g.end = r
				}
				delete(current, r.Key)
			}
		}
	}
	// endFate tells what a Valkey End was: a release, the cleanup, or
	// undecided.
	endFate := func(g *grantInfo) string {
		e := g.end
		switch {
		case e.Kind == Release:
			return Committed
		case !e.NotAfter.IsZero() && e.NotAfter.Before(g.expires):
			return Committed
		case !e.NotBefore.IsZero() && !e.NotBefore.Before(cleanupAt(g.expires)):
			return NotCommitted
		}
		return Undecided
	}

	// Successes first: they claim their records.
	for i := range rep.Calls {
		c := &rep.Calls[i]
		if c.Outcome != OK {
			continue
		}
		switch c.Op {
		case OpAcquire:
			g := grants[grantKey{c.Key, c.Owner, c.Token}]
			if g == nil || !sameTime(g.grant.Acquired, c.Acquired) || !sameTime(g.grant.Expires, c.Expires) {
				rep.Violations = append(rep.Violations, Violation{"missing-success", fmt.Sprintf("call %d: %s's acquisition of %s (token %d) is not in the log", i, c.Client, c.Key, c.Token), []int{i}})
				continue
			}
			g.claimed[g.grant.Seq] = true
			rep.Successes++
		case OpRenew:
			g := grants[grantKey{c.Key, c.Owner, c.Token}]
			found := false
			if g != nil {
				for _, r := range g.renews {
					if !g.claimed[r.Seq] && sameTime(r.Acquired, c.Acquired) && sameTime(r.Expires, c.Expires) {
						g.claimed[r.Seq], found = true, true
						break
					}
				}
			}
			if !found {
				rep.Violations = append(rep.Violations, Violation{"missing-success", fmt.Sprintf("call %d: %s's renewal of %s token %d is not in the log", i, c.Client, c.Key, c.Token), []int{i}})
				continue
			}
			rep.Successes++
		case OpRelease:
			// A release succeeds also when the grant was released before
			// (idempotent) or, on Valkey, cleaned up after its expiry.
			g := grants[grantKey{c.Key, c.Owner, c.Token}]
			if g == nil || g.end == nil {
				rep.Violations = append(rep.Violations, Violation{"missing-success", fmt.Sprintf("call %d: %s's release of %s token %d, but the grant never ended in the log", i, c.Client, c.Key, c.Token), []int{i}})
				continue
			}
			rep.Successes++
		}
	}

	// Ambiguous acquisitions: by owner id.
	for i := range rep.Calls {
		c := &rep.Calls[i]
		if c.Op != OpAcquire || c.Outcome != Ambiguous {
			continue
		}
		if g := byOwner[[2]string{c.Key, c.Owner}]; g != nil && !g.claimed[g.grant.Seq] {
			g.claimed[g.grant.Seq] = true
			c.Fate = Committed
		} else {
			c.Fate = NotCommitted
		}
	}

	// Renewals and releases per grant, against the calls of that grant in
	// the order they were sent.
	type callRef struct {
		i    int
		sent time.Time
	}
	pending := map[grantKey][]callRef{} // ambiguous and OK renew/release calls
	for i, c := range rep.Calls {
		if (c.Op == OpRenew || c.Op == OpRelease) && (c.Outcome == Ambiguous || c.Outcome == OK) {
			gk := grantKey{c.Key, c.Owner, c.Token}
			pending[gk] = append(pending[gk], callRef{i, c.Sent})
		}
	}
	for _, refs := range pending {
		sort.Slice(refs, func(a, b int) bool { return refs[a].sent.Before(refs[b].sent) })
	}
	latestBefore := func(gk grantKey, op Op, at time.Time) int {
		best := -1
		for _, ref := range pending[gk] {
			if rep.Calls[ref.i].Op == op && !ref.sent.After(at.Add(Slack)) {
				best = ref.i
			}
		}
		return best
	}
	for gk, g := range grants {
		// A renewal call executes at most once: each unclaimed renewal
		// goes to the latest ambiguous call sent before it that no other
		// renewal took (a call held back by the server may run after a
		// later call of the same grant).
		for _, r := range g.renews {
			if g.claimed[r.Seq] {
				continue
			}
			i := -1
			refs := pending[gk]
			for j := len(refs) - 1; j >= 0; j-- {
				c := rep.Calls[refs[j].i]
				if c.Op == OpRenew && c.Outcome == Ambiguous && c.Fate == "" && !refs[j].sent.After(r.At.Add(Slack)) {
					i = refs[j].i
					break
				}
			}
			if i < 0 {
				rep.Violations = append(rep.Violations, Violation{"unreported-commit", fmt.Sprintf("%s token %d: a renewal at %v that no ambiguous call explains", gk.key, gk.token, r.At.Format(time.RFC3339Nano)), []int{r.Seq}})
				continue
			}
			rep.Calls[i].Fate = Committed
		}
		if g.end == nil {
			continue
		}
		at := g.end.At
		if at.IsZero() {
			at = g.end.NotAfter
		}
		if at.IsZero() {
			at = time.Unix(1<<40, 0) // no bound: any call may have done it
		}
		i := latestBefore(gk, OpRelease, at)
		if i < 0 || rep.Calls[i].Outcome != Ambiguous {
			continue // an OK release did it, or it was the cleanup
		}
		if f := endFate(g); f != NotCommitted {
			rep.Calls[i].Fate = f
		}
	}
	// Every grant in the log came from a call.
	for gk, g := range grants {
		if g.claimed[g.grant.Seq] {
			continue
		}
		rep.Violations = append(rep.Violations, Violation{"unreported-commit", fmt.Sprintf("%s: the grant of token %d that no successful or ambiguous call explains", gk.key, gk.token), []int{g.grant.Seq}})
	}
	for i := range rep.Calls {
		c := &rep.Calls[i]
		if c.Outcome != Ambiguous {
			continue
		}
		if c.Fate == "" {
			c.Fate = NotCommitted
		}
		switch c.Fate {
		case Committed:
			rep.Committed++
		case NotCommitted:
			rep.NotCommitted++
		default:
			rep.Undecided++
		}
	}
	sort.Slice(rep.Violations, func(a, b int) bool { return rep.Violations[a].Detail < rep.Violations[b].Detail })
	return rep
}

// cleanupAt is the first instant the server may delete an expired lease
// hash: the PEXPIREAT the scripts set, in whole milliseconds past the
// expiry.
func cleanupAt(expires time.Time) time.Time {
	return time.UnixMilli(expires.UnixMicro()/1000 + 1)
}

// sameTime compares a client-side record time with the log's, to the
// microsecond (both backends keep microseconds).
func sameTime(a, b time.Time) bool { return a.UnixMicro() == b.UnixMicro() }
