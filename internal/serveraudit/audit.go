package serveraudit

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Kind is what a record did to a lease.
type Kind string

// Kinds of records.
const (
	// Grant: a new grant (a new owner and a higher token).
	Grant Kind = "grant"
	// Renew: the current grant's acquired and expires times moved.
	Renew Kind = "renew"
	// Release: the current grant's owner released it (PostgreSQL).
	Release Kind = "release"
	// End: the lease hash was deleted (Valkey): a release or the server's
	// cleanup of an expired grant, which the file cannot tell apart.
	End Kind = "end"
	// Unknown: a change to a lease the reader cannot classify. Check
	// reports every one.
	Unknown Kind = "unknown"
)

// Record is one committed change to one lease, in the server's order.
type Record struct {
	// Seq orders records: the file position (Valkey) or the audit table's
	// sequence (PostgreSQL). Changes of one key are in the order the
	// server applied them.
	Seq  int    `json:"seq"`
	Kind Kind   `json:"kind"`
	Key  string `json:"key"` // the leaseapi.Key text, "namespace/name"
	// Owner and Token: of the grant (Grant, Renew, Release); empty and 0
	// for End, which ends whatever grant is current.
	Owner string `json:"owner,omitempty"`
	Token uint64 `json:"token,omitempty"`
	// Acquired and Expires: the server's times the record set (Grant,
	// Renew); for Release, the row's times after it (PostgreSQL sets
	// expires to acquired).
	Acquired time.Time `json:"acquired,omitzero"`
	Expires  time.Time `json:"expires,omitzero"`
	// At is the server time of the change when known: clock_timestamp()
	// in the trigger (PostgreSQL), the script's TIME (Valkey Grant and
	// Renew). Zero for a Valkey End.
	At time.Time `json:"at,omitzero"`
	// NotBefore and NotAfter bracket a Valkey End by the server times of
	// the nearest records before and after it in the file (zero when
	// there is none).
	NotBefore time.Time `json:"not_before,omitzero"`
	NotAfter  time.Time `json:"not_after,omitzero"`
	// Txn groups records one transaction (PostgreSQL txid) or one
	// MULTI/EXEC block (Valkey: its file position) committed together; 0
	// for a Valkey command outside MULTI.
	Txn int64 `json:"txn,omitempty"`
	// Detail says what an Unknown record was.
	Detail string `json:"detail,omitempty"`
}

// Log is the audit of one server for one test namespace: records in the
// server's order.
type Log struct {
	Backend string   `json:"backend"` // "valkey" or "postgres"
	Records []Record `json:"records"`
	// Notes say what the reader skipped or assumed (a truncated tail, a
	// rewrite), for the dump.
	Notes []string `json:"notes,omitempty"`
	// Rounding is how much later than the change itself a record's
	// Acquired may lie: Valkey's scripts round the acquired time up to
	// the millisecond (so that the key's expiry is the grant's), by less
	// than 1ms; PostgreSQL's is exact (0).
	Rounding time.Duration `json:"rounding,omitempty"`
}

// Keys returns the keys the log touches, sorted.
func (l *Log) Keys() []string {
	seen := map[string]bool{}
	for _, r := range l.Records {
		seen[r.Key] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Count returns the number of records of kind k.
func (l *Log) Count(k Kind) int {
	n := 0
	for _, r := range l.Records {
		if r.Kind == k {
			n++
		}
	}
	return n
}

// WriteJSON writes the log as indented JSON, for failure artifacts.
func (l *Log) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(l)
}

// Violation is one broken rule, with the records (Seq) or calls (index)
// involved.
type Violation struct {
	Rule   string `json:"rule"`
	Detail string `json:"detail"`
	Seqs   []int  `json:"seqs,omitempty"`
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// grantState is the current grant of one key while Check replays the log.
type grantState struct {
	live    bool // granted and neither released nor ended
	owner   string
	token   uint64
	expires time.Time
	seq     int
}

// Check is checker C1 on the server's own log, per key in log order:
//
//   - "token-order": every grant's token is higher than every earlier
//     grant's of the key;
//   - "early-grant": a grant comes only after the previous grant was
//     released or ended, or at or after its expiry (server time);
//   - "foreign-renew", "foreign-release": a renewal or release touches
//     only the current grant (same owner and token, not released);
//   - "expired-renew": a renewal happens before the grant's expiry (its
//     Acquired, less the log's Rounding, is before it);
//   - "end-without-grant": a Valkey End deletes a lease hash that holds a
//     grant;
//   - "unknown": a change the reader could not classify.
//
// Times are the server's own (one clock), so no slack applies.
func (l *Log) Check() []Violation {
	var out []Violation
	state := map[string]*grantState{}
	high := map[string]uint64{}
	for _, r := range l.Records {
		g := state[r.Key]
		if g == nil {
			g = &grantState{}
			state[r.Key] = g
		}
		switch r.Kind {
		case Grant:
			if h, ok := high[r.Key]; ok && r.Token <= h {
				out = append(out, Violation{"token-order", fmt.Sprintf("%s: token %d granted after token %d", r.Key, r.Token, h), []int{g.seq, r.Seq}})
			}
			if g.live && r.Acquired.Before(g.expires) {
				out = append(out, Violation{"early-grant", fmt.Sprintf("%s: token %d granted %v before token %d expired, which was not released", r.Key, r.Token, g.expires.Sub(r.Acquired), g.token), []int{g.seq, r.Seq}})
			}
			high[r.Key] = max(high[r.Key], r.Token)
			*g = grantState{live: true, owner: r.Owner, token: r.Token, expires: r.Expires, seq: r.Seq}
		case Renew:
			switch {
			case !g.live || g.owner != r.Owner || g.token != r.Token:
				out = append(out, Violation{"foreign-renew", fmt.Sprintf("%s: renewal of token %d, current token %d (live %v)", r.Key, r.Token, g.token, g.live), []int{g.seq, r.Seq}})
			case !r.Acquired.Add(-l.Rounding).Before(g.expires):
				out = append(out, Violation{"expired-renew", fmt.Sprintf("%s: token %d renewed %v after it expired", r.Key, r.Token, r.Acquired.Sub(g.expires)), []int{g.seq, r.Seq}})
			}
			if g.live && g.owner == r.Owner && g.token == r.Token {
				g.expires, g.seq = r.Expires, r.Seq
			}
		case Release:
			if !g.live || g.owner != r.Owner || g.token != r.Token {
				out = append(out, Violation{"foreign-release", fmt.Sprintf("%s: release of token %d, current token %d (live %v)", r.Key, r.Token, g.token, g.live), []int{g.seq, r.Seq}})
				continue
			}
			g.live, g.seq = false, r.Seq
		case End:
			if !g.live {
				out = append(out, Violation{"end-without-grant", fmt.Sprintf("%s: lease hash deleted with no grant in it", r.Key), []int{g.seq, r.Seq}})
			}
			g.live, g.seq = false, r.Seq
		default:
			out = append(out, Violation{"unknown", fmt.Sprintf("%s: %s", r.Key, r.Detail), []int{r.Seq}})
		}
	}
	return out
}
