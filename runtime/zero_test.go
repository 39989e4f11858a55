package runtime_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/leasekit/lease/leaseapi"
	"github.com/leasekit/lease/runtime"
)

// zeroArg returns a valid argument of type typ for calling a method of a
// zero value: the method must fail because of the receiver, not its input.
func zeroArg(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	ctxType := reflect.TypeFor[context.Context]()
	switch {
	case typ == ctxType:
		return reflect.ValueOf(context.Background())
	case typ == reflect.TypeFor[leaseapi.Key]():
		return reflect.ValueOf(testKey(t, "zero-value"))
	case typ == reflect.TypeFor[leaseapi.Policy]():
		return reflect.ValueOf(basicPolicy(t))
	case typ == reflect.TypeFor[[]leaseapi.RenewRequest]():
		return reflect.ValueOf([]leaseapi.RenewRequest{{TTL: time.Second}, {TTL: time.Second}})
	case typ == reflect.TypeFor[time.Duration]():
		return reflect.ValueOf(time.Second)
	case typ.Kind() == reflect.Func:
		// A callback that would report being called.
		return reflect.MakeFunc(typ, func([]reflect.Value) []reflect.Value {
			t.Errorf("a method of a zero value called its callback %v", typ)
			out := make([]reflect.Value, typ.NumOut())
			for i := range out {
				out[i] = reflect.Zero(typ.Out(i))
			}
			return out
		})
	}
	return reflect.Zero(typ)
}

// TestZeroValuesFailClosed calls every exported method of the zero values
// and nil pointers of Client, Handle, Managed and ObservedBackend (found by
// reflection, so a method added later is covered too): none panics, every
// error matches
// ErrInvalidState, no state is Active, every channel is closed (nothing to
// wait for) and no handle or Managed comes back.
func TestZeroValuesFailClosed(t *testing.T) {
	receivers := []struct {
		name string
		v    any
	}{
		{"nil *Client", (*runtime.Client)(nil)},
		{"zero Client", &runtime.Client{}},
		{"nil *Handle", (*runtime.Handle)(nil)},
		{"zero Handle", &runtime.Handle{}},
		{"nil *Managed", (*runtime.Managed)(nil)},
		{"zero Managed", &runtime.Managed{}},
		{"nil *ObservedBackend", (*runtime.ObservedBackend)(nil)},
		{"zero ObservedBackend", &runtime.ObservedBackend{}},
	}
	errType := reflect.TypeFor[error]()
	for _, r := range receivers {
		rv := reflect.ValueOf(r.v)
		if rv.NumMethod() == 0 {
			t.Fatalf("%s: no methods found", r.name)
		}
		for i := range rv.NumMethod() {
			m, name := rv.Method(i), rv.Type().Method(i).Name
			t.Run(r.name+"."+name, func(t *testing.T) {
				args := make([]reflect.Value, m.Type().NumIn())
				for j := range args {
					args[j] = zeroArg(t, m.Type().In(j))
				}
				var out []reflect.Value
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("%s.%s panicked: %v", r.name, name, p)
						}
					}()
					out = m.Call(args)
				}()
				for _, o := range out {
					if name == "WatchRelease" && o.Kind() == reflect.Chan {
						// Documented: a channel that never fires (nil), the
						// answer of a backend that cannot notify.
						continue
					}
					checkZeroResult(t, r.name+"."+name, o, errType)
				}
			})
		}
	}
}

func checkZeroResult(t *testing.T, what string, o reflect.Value, errType reflect.Type) {
	t.Helper()
	switch v := o.Interface().(type) {
	case error:
		wantKind(t, what, v, leaseapi.ErrInvalidState)
		return
	case leaseapi.State:
		if v == leaseapi.StateActive {
			t.Fatalf("%s: state got Active, want a zero value that is never Active", what)
		}
	case runtime.Status:
		if v.State == leaseapi.StateActive || v.Record.Token != 0 || v.Managed {
			t.Fatalf("%s: got %+v, want a zero status", what, v)
		}
		wantKind(t, what+" Err", v.Err, leaseapi.ErrInvalidState)
	case leaseapi.Record:
		if v != (leaseapi.Record{}) {
			t.Fatalf("%s: got %+v, want the zero record", what, v)
		}
	case *runtime.Handle:
		if v != nil {
			t.Fatalf("%s: got a handle from a zero value", what)
		}
	case *runtime.Managed:
		if v != nil {
			t.Fatalf("%s: got a Managed from a zero value", what)
		}
	case time.Time:
		if !v.IsZero() {
			t.Fatalf("%s: got %v, want the zero time", what, v)
		}
	case leaseapi.Capabilities:
		if v != (leaseapi.Capabilities{}) {
			t.Fatalf("%s: got %+v, want no claims", what, v)
		}
	case leaseapi.Backend:
		if v != nil {
			t.Fatalf("%s: got a backend from a zero value", what)
		}
	case []leaseapi.RenewResult:
		if len(v) != 2 {
			t.Fatalf("%s: got %d results for 2 requests", what, len(v))
		}
		for _, r := range v {
			wantKind(t, what+" element", r.Err, leaseapi.ErrInvalidState)
		}
	case string:
		if v != "" {
			t.Fatalf("%s: got %q, want the empty string", what, v)
		}
	case func():
		v() // a stop function must be callable
	}
	if o.Type() == errType && o.IsNil() {
		t.Fatalf("%s: got a nil error, want one matching ErrInvalidState", what)
	}
	if o.Kind() == reflect.Chan {
		if o.IsNil() {
			t.Fatalf("%s: got a nil channel (blocks forever), want a closed one", what)
		}
		if _, ok := o.TryRecv(); ok {
			t.Fatalf("%s: channel yielded a value, want it closed and empty", what)
		}
		if c, _ := o.TryRecv(); !c.IsValid() {
			// TryRecv on a closed channel returns the zero value and ok=false;
			// an invalid Value means the receive would block.
			t.Fatalf("%s: channel is open (a receive blocks), want it closed", what)
		}
	}
}
