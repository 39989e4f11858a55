package runtime

import (
	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/supervisor"
)

// The guards of this file make the zero values and nil pointers of
// Client, Handle and Managed fail closed: every method that acts returns an
// error matching ErrInvalidState, every read returns the zero answer (a
// zero State, which is never Active), and none panics. Only values built by
// NewClient, Acquire/TryAcquire and StartManaged are usable.

// errUnusable is the error of every method called on a zero value.
func errUnusable(op string) error {
	return leaseapi.NewError(op, leaseapi.ErrInvalidState, "zero value or nil: not built by this package")
}

// usable reports whether c was built by NewClient.
func (c *Client) usable() bool { return c != nil && c.sup != nil }

// usable reports whether h was returned by an acquisition.
func (h *Handle) usable() bool { return h != nil && h.s != nil && h.c.usable() }

// view returns h's published view, or a zero one for an unusable handle.
func (h *Handle) view() *supervisor.View {
	if !h.usable() {
		return &supervisor.View{}
	}
	return h.s.View()
}

// usable reports whether m was returned by StartManaged.
func (m *Managed) usable() bool { return m != nil && m.s != nil }

// closedDone and closedLoss answer Done and Loss on unusable values: there
// is no lease to wait for, so a waiter must not block forever.
var (
	closedDone = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()
	closedLoss = func() chan Loss { ch := make(chan Loss); close(ch); return ch }()
)
