package leaseapi

import (
	"strings"
	"unicode/utf8"
)

// MaxKeyBytes bounds the encoded form of a [Key] ("namespace/name").
const MaxKeyBytes = 256

// Key names a lease: a namespace (no '/') and a name (which may contain '/',
// but no empty segments). The zero Key is invalid and is rejected by every
// operation with [ErrInvalidState].
//
// A Key is a small immutable value, safe for concurrent use.
type Key struct {
	namespace string
	name      string
}

// NewKey validates namespace and name and returns the Key. It fails with
// [ErrInvalidState] when either part is empty, the namespace contains '/',
// the name has an empty '/'-separated segment, either part contains a
// control byte or invalid UTF-8, or the encoding exceeds [MaxKeyBytes].
// The error never contains the rejected text.
func NewKey(namespace, name string) (Key, error) {
	switch {
	case namespace == "" || name == "":
		return Key{}, invalid("new key", "empty segment")
	case strings.IndexByte(namespace, '/') >= 0:
		return Key{}, invalid("new key", "slash in namespace")
	case len(namespace)+1+len(name) > MaxKeyBytes:
		return Key{}, invalid("new key", "key too long")
	case !cleanText(namespace) || !cleanText(name):
		return Key{}, invalid("new key", "control byte or invalid utf-8")
	}
	for seg := range strings.SplitSeq(name, "/") {
		if seg == "" {
			return Key{}, invalid("new key", "empty segment")
		}
	}
	return Key{namespace: namespace, name: name}, nil
}

// ParseKey parses the form produced by [Key.String]: the namespace is the
// text before the first '/', the name everything after it.
func ParseKey(s string) (Key, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok {
		return Key{}, invalid("parse key", "missing slash")
	}
	return NewKey(ns, name)
}

// MustKey is NewKey for keys written in the program text; it panics on an
// invalid key and must not be used on input.
func MustKey(namespace, name string) Key {
	k, err := NewKey(namespace, name)
	if err != nil {
		panic(err)
	}
	return k
}

// String returns "namespace/name". It is the key itself: do not log it where
// key names are confidential (events carry a keyed hash instead).
func (k Key) String() string {
	if k.IsZero() {
		return ""
	}
	return k.namespace + "/" + k.name
}

// Namespace returns the namespace part.
func (k Key) Namespace() string { return k.namespace }

// Name returns the name part.
func (k Key) Name() string { return k.name }

// IsZero reports whether k is the zero (invalid) Key.
func (k Key) IsZero() bool { return k.namespace == "" }

// Check returns nil for a Key built by [NewKey] and [ErrInvalidState] for the
// zero Key.
func (k Key) Check() error {
	if k.IsZero() {
		return invalid("key", "zero key")
	}
	return nil
}

// CleanText reports whether s is valid UTF-8 without ASCII control bytes or
// DEL: the rule for key parts and owner ids, which backends also apply to
// names of their own (cache names, prefixes).
func CleanText(s string) bool { return cleanText(s) }

// cleanText reports valid UTF-8 without ASCII control bytes or DEL. The
// printable ASCII bytes (every byte of an owner id the runtime draws)
// pass with one comparison each; the rest of the string from the first
// other byte on is checked in full. Every acquisition and release checks
// its owner id, so this is on the pair's path
// (TestCleanTextIsValidUTF8WithoutControls pins the rule).
func cleanText(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i]-0x20 >= 0x7f-0x20 { // not ' ' to '~'
			return cleanTail(s[i:])
		}
	}
	return true
}

// cleanTail is cleanText for any string.
func cleanTail(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f {
			return false
		}
	}
	return true
}
