package service

import (
	"fmt"

	"github.com/leasekit/lease/leaseapi"
)

// PanicError reports a panic in Options.Run or in a leadership callback.
// The Singleton recovers it, steps down (releasing the lease) and reports
// it through Options.OnError; the panic never reaches the campaign
// goroutine. It is immutable once made and safe for concurrent use. It
// matches leaseapi.ErrInvalidState (the callback broke its
// contract). Its message never contains the panic value; Value has it.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
}

// Error implements error.
func (e *PanicError) Error() string { return "lease: service: callback panicked" }

// Unwrap makes the error match leaseapi.ErrInvalidState.
func (e *PanicError) Unwrap() error { return leaseapi.ErrInvalidState }

// String describes the panic value for logs that may contain it.
func (e *PanicError) String() string { return fmt.Sprintf("callback panicked: %v", e.Value) }
