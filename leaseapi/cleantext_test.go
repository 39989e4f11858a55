package leaseapi_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leasekit/lease/leaseapi"
)

// TestCleanTextIsValidUTF8WithoutControls: CleanText accepts exactly the
// valid UTF-8 strings without an ASCII control byte or DEL, checked
// against that definition for every string of one and two bytes, every
// three-byte string that starts a multi-byte sequence, and longer ones
// that mix ASCII with valid and broken sequences at each position.
func TestCleanTextIsValidUTF8WithoutControls(t *testing.T) {
	want := func(s string) bool {
		return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f })
	}
	check := func(s string) {
		t.Helper()
		if got := leaseapi.CleanText(s); got != want(s) {
			t.Fatalf("CleanText(%q) = %v, want %v", s, got, want(s))
		}
	}
	// The bytes at which UTF-8's continuation and lead ranges change.
	edges := []byte{0x00, 0x1f, 0x20, 0x7e, 0x7f, 0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf, 0xc0, 0xff}
	check("")
	for a := range 256 {
		check(string([]byte{byte(a)}))
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
		if a >= 0xc0 {
			for _, b := range edges {
				for _, c := range edges {
					check(string([]byte{byte(a), b, c}))
				}
			}
		}
	}
	for _, part := range []string{"é", "€", "😀", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc0\xaf", "\xe2\x82", "\xff", "\x7f", "\x1f", "\uFFFD"} {
		for i := range 5 {
			check(strings.Repeat("a", i) + part + strings.Repeat("b", 4-i))
		}
	}
}
