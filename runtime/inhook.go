package runtime

import (
	"reflect"
	goruntime "runtime"
)

// hookCaller is the function that calls the OnStateChange hook, by name as
// stack frames report it.
var hookCaller = goruntime.FuncForPC(reflect.ValueOf((*stateQueue).call).Pointer()).Name()

// inHook reports whether its caller runs on the goroutine of an
// OnStateChange hook call, of any client: whether stateQueue.call is on
// the caller's stack. Go gives a goroutine no identity to compare, and
// recording one per delivery (runtime.Stack) would cost more than the
// delivery; the stack is read only here, by a Close that finds a delivery
// running. It walks the whole stack, however deep the hook's own calls go.
func inHook() bool {
	pcs := make([]uintptr, 64)
	for {
		n := goruntime.Callers(2, pcs)
		if n < len(pcs) {
			pcs = pcs[:n]
			break
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
	frames := goruntime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function == hookCaller {
			return true
		}
		if !more {
			return false
		}
	}
}
