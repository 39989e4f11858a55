package scheduler

import (
	"fmt"

	"github.com/leasekit/lease/leaseapi"
)

// PanicError reports a job that panicked. The scheduler recovers the panic,
// releases the run's lease and reports the error in an [Event]; the panic
// never reaches the scheduler's goroutine. It is immutable once made and
// safe for concurrent use. It matches
// leaseapi.ErrInvalidState (the job broke its contract). Its message never
// contains the panic value, which may hold anything; Value has it.
type PanicError struct {
	// Value is what the job passed to panic.
	Value any
}

// Error implements error.
func (e *PanicError) Error() string { return "lease: scheduler: job panicked" }

// Unwrap makes the error match leaseapi.ErrInvalidState.
func (e *PanicError) Unwrap() error { return leaseapi.ErrInvalidState }

// String describes the panic value for logs that may contain it.
func (e *PanicError) String() string { return fmt.Sprintf("job panicked: %v", e.Value) }
