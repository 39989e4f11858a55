package valkey

import (
	"strconv"
	"time"

	"github.com/leasekit/lease/leaseapi"
)

// callText builds the text of one script call, its key names and its
// arguments, in one buffer that becomes one string: one allocation per
// call for all of them (TestOpAllocs guards it), where building each name
// and number on its own took one apiece. The caller owns the buffer (an
// array on its stack, which only stays there if no pointer to it is
// stored, hence the append style): fields are appended in order, each
// method returning the grown buffer and recording where the field ends;
// done makes the one string, and field(i) is then the i-th field (from
// 0), a slice of it.
type callText struct {
	all  string
	ends [8]int
	n    int
}

// end records that a field ends at the end of b.
func (t *callText) end(b []byte) []byte {
	t.ends[t.n] = len(b)
	t.n++
	return b
}

func (t *callText) int(b []byte, n int64) []byte { return t.end(strconv.AppendInt(b, n, 10)) }

// key appends the server key of k with the suffix (leaseSuffix,
// tokenSuffix): "prefix:{E}" then the suffix; see Store.tag.
func (t *callText) key(b []byte, prefix string, k leaseapi.Key, suffix string) []byte {
	return t.end(appendKey(b, prefix, k, suffix))
}

// appendKey appends the server key of k with the suffix, as
// callText.key does (RenewBatch builds many in one buffer).
func appendKey(b []byte, prefix string, k leaseapi.Key, suffix string) []byte {
	b = append(b, prefix...)
	b = append(b, ":{"...)
	b = appendEscaped(b, k.Namespace())
	b = append(b, '/')
	b = appendEscaped(b, k.Name())
	return append(b, suffix...)
}

// value appends the lease value a caller expects for rec's grant with
// the TTL ttl, unmarked, "TTL:TOKEN:OWNER" (see scripts.go). The value
// starts with its TTL's text (µs): ttlLen returns its length.
func (t *callText) value(b []byte, rec leaseapi.Record, ttl time.Duration) []byte {
	return t.end(appendValue(b, rec, ttl))
}

// appendValue appends the value field of callText.value.
func appendValue(b []byte, rec leaseapi.Record, ttl time.Duration) []byte {
	b = strconv.AppendInt(b, ttl.Microseconds(), 10)
	b = append(b, ':')
	b = strconv.AppendUint(b, uint64(rec.Token), 10)
	b = append(b, ':')
	return append(b, rec.Owner...)
}

// ttlLen is the length of the TTL text at the start of a value field.
func ttlLen(ttl time.Duration) int {
	var d [20]byte
	return len(strconv.AppendInt(d[:0], ttl.Microseconds(), 10))
}

// id appends a fresh request id (reqid.go).
func (t *callText) id(b []byte) []byte { return t.int(b, newRequestIDValue()) }

// done turns b into the one string; call it once, after the last field
// and before field.
func (t *callText) done(b []byte) { t.all = string(b) }

// field returns the i-th field.
func (t *callText) field(i int) string {
	start := 0
	if i > 0 {
		start = t.ends[i-1]
	}
	return t.all[start:t.ends[i]]
}

// textBuf is the stack buffer size for a callText: room for two key names
// and the arguments of any script with a short key and owner id; longer
// ones grow the buffer (one more allocation).
const textBuf = 256

// Key name suffixes after the hash tag.
const leaseSuffix, tokenSuffix, waitSuffix = "}:lease", "}:token", "}:wait"
