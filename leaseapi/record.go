package leaseapi

import (
	"strconv"
	"time"
)

// Token is a fencing token: it strictly increases with every successful
// acquisition of one key and is never reused. Zero means "no token". A
// protected resource accepts a write only if its token is not lower than the
// highest token it has accepted.
type Token uint64

// String returns the token in decimal.
func (t Token) String() string { return strconv.FormatUint(uint64(t), 10) }

// MaxOwnerBytes bounds an owner id.
const MaxOwnerBytes = 128

// Record is one grant of a lease as the backend stored it. It is a value:
// the runtime never mutates a Record it has handed out.
type Record struct {
	// Key is the lease's key.
	Key Key
	// Owner is the opaque owner id chosen by the acquirer.
	Owner string
	// Token is the fencing token of this acquisition (kept by Renew).
	Token Token
	// AcquiredAt is the backend time at which the current grant was made:
	// the acquisition or the latest renewal.
	AcquiredAt time.Time
	// ExpiresAt is the backend time at which the grant ends unless renewed.
	// ExpiresAt - AcquiredAt is the granted TTL.
	ExpiresAt time.Time
}

// Check returns [ErrInvalidState] when r cannot name a grant: zero key,
// invalid owner id or zero token.
func (r Record) Check() error { return r.check() }

// check is Check through a pointer, for the checks below that would
// otherwise copy the whole record to check three fields.
func (r *Record) check() error {
	if err := r.Key.Check(); err != nil {
		return err
	}
	if err := CheckOwner(r.Owner); err != nil {
		return err
	}
	return checkToken(r.Token)
}

// checkToken refuses the zero token, which names no grant.
func checkToken(t Token) error {
	if t == 0 {
		return invalid("record", "zero token")
	}
	return nil
}

// GrantedTTL returns ExpiresAt - AcquiredAt, the TTL the backend granted.
func (r Record) GrantedTTL() time.Duration { return r.ExpiresAt.Sub(r.AcquiredAt) }

// SafeDeadline returns the backend-clock instant until which r may be
// relied on when margin is reserved for delay and uncertainty: ExpiresAt
// minus margin, as the reference API defines it. A negative margin counts
// as zero (the result is never past ExpiresAt), and a margin that is not
// shorter than the granted TTL gives AcquiredAt (no trust at all, never an
// instant before the grant).
//
// It is in the backend's clock. A handle's admission decision is made on the
// local clock from the send time of the request that produced r
// ([Record.LocalDeadline]); Handle.Deadline and Handle.State are the
// authoritative local checks.
func (r Record) SafeDeadline(margin time.Duration) time.Time {
	margin = max(margin, 0)
	if r.GrantedTTL() <= margin {
		return r.AcquiredAt
	}
	return r.ExpiresAt.Add(-margin)
}

// UsableAt reports whether the backend-clock instant now is strictly before
// r.SafeDeadline(margin). Handle.State is the authoritative local check.
func (r Record) UsableAt(now time.Time, margin time.Duration) bool {
	return now.Before(r.SafeDeadline(margin))
}

// LocalDeadline returns the local instant until which the holder of r may
// act: sentAt (the local clock reading taken before the request that
// produced r was sent) plus the smaller of the policy's TTL and the granted
// TTL, minus the policy's safety margin. Anchoring at the send, not the
// reply, means a slow round trip can only shorten the trust window, never
// stretch it. This is the deadline a handle enforces.
//
// A record whose granted TTL is not longer than the margin (including a
// broken one that expires before it was acquired) gives no trust at all:
// the deadline is sentAt itself, never an overflowed instant in the future.
func (r Record) LocalDeadline(sentAt time.Time, p Policy) time.Time {
	ttl := p.TTL()
	if g := r.GrantedTTL(); g < ttl {
		ttl = g
	}
	if ttl <= p.SafetyMargin() {
		return sentAt
	}
	return sentAt.Add(ttl - p.SafetyMargin())
}

// LocalUsableAt reports whether the holder of r, granted by a request sent
// at the local instant sentAt, may still act at the local instant now:
// now is strictly before r.LocalDeadline(sentAt, p).
func (r Record) LocalUsableAt(now, sentAt time.Time, p Policy) bool {
	return now.Before(r.LocalDeadline(sentAt, p))
}

// CheckOwner returns [ErrInvalidState] unless owner is 1 to [MaxOwnerBytes]
// bytes of valid UTF-8 without control bytes.
func CheckOwner(owner string) error {
	if owner == "" || len(owner) > MaxOwnerBytes || !cleanText(owner) {
		return invalid("owner", "invalid owner id")
	}
	return nil
}

// CheckTTL returns [ErrInvalidState] unless 1ms <= ttl <= [MaxTTL]. Backends
// store expiry with millisecond resolution at best.
func CheckTTL(ttl time.Duration) error {
	if ttl < time.Millisecond || ttl > MaxTTL {
		return invalid("ttl", "ttl out of range")
	}
	return nil
}
