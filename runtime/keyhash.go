package runtime

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"

	"github.com/leasekit/lease/leaseapi"
)

// MinKeyHashSecret is the shortest secret [NewKeyHasher] accepts.
const MinKeyHashSecret = 16

// KeyHasher turns a lease key into the identifier that telemetry carries
// instead of the key: the first 8 bytes of HMAC-SHA256(secret, key), hex
// encoded. Without the secret a hash cannot be reversed by guessing key
// names. A KeyHasher is immutable and safe for concurrent use.
//
// By default (a nil *KeyHasher in [ClientOptions] or [ObserveOptions])
// each Client and each ObservedBackend draws its own random secret, so
// hashes are stable only within it. Give
// every process of a deployment a KeyHasher built from one shared secret
// to follow a lease across the fleet.
type KeyHasher struct {
	secret [sha256.Size]byte
}

// NewKeyHasher returns a KeyHasher keyed by secret, which must hold at
// least MinKeyHashSecret bytes (a shorter one is ErrInvalidState). Two
// KeyHashers built from the same secret give the same hash for a key.
func NewKeyHasher(secret []byte) (*KeyHasher, error) {
	if len(secret) < MinKeyHashSecret {
		return nil, leaseapi.NewError("key hasher", leaseapi.ErrInvalidState, "secret too short")
	}
	// The secret is condensed to a fixed size so any length is accepted
	// and none is kept as given.
	return &KeyHasher{secret: sha256.Sum256(secret)}, nil
}

// randomKeyHasher returns a KeyHasher with a secret from crypto/rand.
func randomKeyHasher() (*KeyHasher, error) {
	h := new(KeyHasher)
	if _, err := rand.Read(h.secret[:]); err != nil {
		return nil, leaseapi.NewError("key hasher", leaseapi.ErrInvalidState, "random source failed")
	}
	return h, nil
}

// Hash returns the hash of k (16 hex digits). A nil KeyHasher returns "".
func (h *KeyHasher) Hash(k leaseapi.Key) string {
	if h == nil {
		return ""
	}
	m := hmac.New(sha256.New, h.secret[:])
	m.Write([]byte(k.String()))
	var sum [sha256.Size]byte
	return hex.EncodeToString(m.Sum(sum[:0])[:8])
}
