package simtest

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// EventKind names a recorded history event.
type EventKind string

// Kinds of history events.
const (
	// Granted: an acquisition returned a lease to its holder.
	Granted EventKind = "granted"
	// Admitted: a holder observed its handle Active and acted on it.
	Admitted EventKind = "admitted"
	// Wrote: a protected write was attempted on a fenced resource.
	Wrote EventKind = "wrote"
)

// HistoryEvent is one entry of a [History].
type HistoryEvent struct {
	Seq      int            `json:"seq"`
	Kind     EventKind      `json:"kind"`
	Key      string         `json:"key,omitempty"`
	Resource string         `json:"resource,omitempty"`
	Owner    string         `json:"owner"`
	Token    leaseapi.Token `json:"token"`
	At       time.Time      `json:"at"`
	Accepted bool           `json:"accepted,omitempty"`
}

// History records what a scenario's holders did, on one clock (the test's
// local clock), and checks it for safety violations afterwards. It is safe
// for concurrent use.
type History struct {
	mu     sync.Mutex
	events []HistoryEvent
}

// NewHistory returns an empty history.
func NewHistory() *History { return &History{} }

func (h *History) add(e HistoryEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e.Seq = len(h.events)
	h.events = append(h.events, e)
}

// Grant records that owner's acquisition of k returned token at time at
// (the local time the holder received it).
func (h *History) Grant(k leaseapi.Key, owner string, token leaseapi.Token, at time.Time) {
	h.add(HistoryEvent{Kind: Granted, Key: k.String(), Owner: owner, Token: token, At: at})
}

// Admit records that owner, holding k with token, saw its handle Active at
// time at and acted on the lease.
func (h *History) Admit(k leaseapi.Key, owner string, token leaseapi.Token, at time.Time) {
	h.add(HistoryEvent{Kind: Admitted, Key: k.String(), Owner: owner, Token: token, At: at})
}

// Write records a protected write on resource and whether it was accepted.
func (h *History) Write(resource, owner string, token leaseapi.Token, accepted bool, at time.Time) {
	h.add(HistoryEvent{Kind: Wrote, Resource: resource, Owner: owner, Token: token, At: at, Accepted: accepted})
}

// Events returns a copy of the recorded events in recording order.
func (h *History) Events() []HistoryEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HistoryEvent(nil), h.events...)
}

// Violation is one safety violation found by [History.Check].
type Violation struct {
	Rule   string
	Detail string
	Events []int // Seq of the events involved
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// Check returns every safety violation in the history:
//
//   - "grant-order": for one key, a grant's token is not higher than every
//     earlier grant's (tokens must strictly increase in time);
//   - "overlap": a holder was admitted with a token after a higher token
//     of the same key was granted (at the same instant: the grant was
//     recorded first): two owners held the key at once;
//   - "ungranted": an admission with a token that was never granted to
//     that owner before it;
//   - "stale-write": a resource accepted a token lower than one it had
//     already accepted, or an equal token from another owner.
func (h *History) Check() []Violation {
	evs := h.Events()
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At.Before(evs[j].At) })
	var out []Violation
	type grant struct {
		token leaseapi.Token
		owner string
		at    time.Time
		seq   int
	}
	grants := map[string][]grant{}
	type high struct {
		token leaseapi.Token
		owner string
		seq   int
	}
	highs := map[string]high{}
	for _, e := range evs {
		switch e.Kind {
		case Granted:
			gs := grants[e.Key]
			for _, g := range gs {
				if g.token >= e.Token {
					out = append(out, Violation{"grant-order", fmt.Sprintf("token %d granted after token %d", e.Token, g.token), []int{g.seq, e.Seq}})
				}
			}
			grants[e.Key] = append(gs, grant{e.Token, e.Owner, e.At, e.Seq})
		case Wrote:
			if !e.Accepted {
				continue
			}
			hi, seen := highs[e.Resource]
			if seen && (e.Token < hi.token || (e.Token == hi.token && e.Owner != hi.owner)) {
				out = append(out, Violation{"stale-write", fmt.Sprintf("resource accepted token %d after token %d", e.Token, hi.token), []int{hi.seq, e.Seq}})
			}
			if !seen || e.Token >= hi.token {
				highs[e.Resource] = high{e.Token, e.Owner, e.Seq}
			}
		}
	}
	// Admissions are checked against every grant, whatever the order they
	// were recorded in: a grant at or before the admission instant with a
	// higher token is an overlap.
	for _, e := range evs {
		if e.Kind != Admitted {
			continue
		}
		covered := false
		for _, g := range grants[e.Key] {
			// "Before" on one clock; at the same instant (simulated time
			// does not advance within a step) the recording order decides.
			before := g.at.Before(e.At) || g.at.Equal(e.At) && g.seq < e.Seq
			if g.token == e.Token && g.owner == e.Owner && before {
				covered = true
			}
			if g.token > e.Token && before {
				out = append(out, Violation{"overlap", fmt.Sprintf("token %d admitted at or after token %d was granted", e.Token, g.token), []int{g.seq, e.Seq}})
			}
		}
		if !covered {
			out = append(out, Violation{"ungranted", fmt.Sprintf("token %d admitted without a grant", e.Token), []int{e.Seq}})
		}
	}
	return out
}

// WriteJSON writes the events as a JSON array, for failure artifacts.
func (h *History) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(h.Events())
}
