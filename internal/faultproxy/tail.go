package faultproxy

import "bytes"

// tail keeps the last MaxNeedle-1 bytes a client sent on one link, so that
// a needle split across two chunks is found in the second.
type tail struct {
	b []byte
}

// endsIn reports whether needle occurs in what was sent before plus chunk,
// ending inside chunk: in chunk itself or straddling its start. An empty
// needle is in every chunk.
func (t *tail) endsIn(chunk, needle []byte) bool {
	if len(needle) == 0 || bytes.Contains(chunk, needle) {
		return true
	}
	k := len(needle) - 1 // at most this much of the needle precedes chunk
	before := t.b[len(t.b)-min(k, len(t.b)):]
	head := chunk[:min(k, len(chunk))]
	return bytes.Contains(append(bytes.Clone(before), head...), needle)
}

// add records chunk as sent.
func (t *tail) add(chunk []byte) {
	const keep = MaxNeedle - 1
	if len(chunk) >= keep {
		t.b = append(t.b[:0], chunk[len(chunk)-keep:]...)
		return
	}
	t.b = append(t.b, chunk...)
	if over := len(t.b) - keep; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
}
