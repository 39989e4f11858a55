package leaseapi

import (
	"crypto/rand"
	"encoding/hex"
	mrand "math/rand/v2"
	"time"
)

// RandomOwners is the default [OwnerSource]: 128 bits from crypto/rand,
// hex encoded (32 bytes).
type RandomOwners struct{}

// NewOwner returns a fresh random owner id.
func (RandomOwners) NewOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", NewError("new owner", ErrInvalidState, "random source failed")
	}
	return hex.EncodeToString(b[:]), nil
}

// RandomJitter is the default [RetrySource], drawing from math/rand/v2's
// concurrency-safe global generator.
type RandomJitter struct{}

// Jitter returns a uniformly random duration in [0, max).
func (RandomJitter) Jitter(max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	return time.Duration(mrand.Int64N(int64(max)))
}
