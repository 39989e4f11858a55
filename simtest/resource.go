package simtest

import (
	"sync"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// Resource is the reference fenced resource: it accepts a write only if
// its token is at least the highest token it has accepted (an equal token
// only from the same owner), and records every attempt in a History. It is
// safe for concurrent use.
type Resource struct {
	name string
	hist *History

	mu        sync.Mutex
	high      leaseapi.Token
	highOwner string
	value     string
	accepted  int
}

// NewResource returns an empty resource recording into hist (may be nil).
func NewResource(name string, hist *History) *Resource {
	return &Resource{name: name, hist: hist}
}

// Write stores value if token passes the fence, else returns an error
// matching leaseapi.ErrStaleOwner and stores nothing. at is the writer's
// local time, for the history.
func (r *Resource) Write(owner string, token leaseapi.Token, value string, at time.Time) error {
	r.mu.Lock()
	ok := r.admits(owner, token)
	if ok {
		r.high, r.highOwner, r.value = token, owner, value
		r.accepted++
	}
	r.mu.Unlock()
	if r.hist != nil {
		r.hist.Write(r.name, owner, token, ok, at)
	}
	if !ok {
		return leaseapi.NewError("fenced write", leaseapi.ErrStaleOwner, "token below the fence")
	}
	return nil
}

// Value returns the stored value, the highest accepted token and how many
// writes were accepted.
func (r *Resource) Value() (value string, token leaseapi.Token, accepted int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.high, r.accepted
}
