package leaseapi

// State is a handle's view of its lease. The zero State is not a state any
// handle reports; it is never Active, so an uninitialised value fails closed.
//
//	          renew/validate fails            renew/validate ok (before deadline)
//	Active ──────────────────────▶ Uncertain ──────────────────────────────▶ Active
//	  │ │ deadline passes              │ deadline passes
//	  │ └──────────────▶ Expired ◀─────┘
//	  │ stale owner/token (any op)             Release ok
//	  └──────────────▶ Lost          Active/Uncertain ──────▶ Released
//
// Expired, Lost and Released are terminal.
type State uint8

// The values are numbered as in the reference API.
const (
	// StateActive: the holder may act (admission granted) until the deadline.
	StateActive State = 1
	// StateExpired: the local deadline passed without a confirmed renewal.
	StateExpired State = 2
	// StateLost: the backend proved that another grant replaced this one,
	// or the client was closed before the lease could be released.
	StateLost State = 3
	// StateUncertain: the last operation had no reliable outcome; no
	// admission until a Renew or Validate succeeds before the deadline.
	StateUncertain State = 4
	// StateReleased: the holder released the lease.
	StateReleased State = 5
)

// String returns the lower-case state name.
func (s State) String() string {
	switch s {
	case StateActive:
		return "active"
	case StateUncertain:
		return "uncertain"
	case StateExpired:
		return "expired"
	case StateLost:
		return "lost"
	case StateReleased:
		return "released"
	}
	return "invalid"
}

// Terminal reports whether no operation can leave s.
func (s State) Terminal() bool {
	return s == StateExpired || s == StateLost || s == StateReleased
}
