package scheduler

import (
	"fmt"

	"github.com/leasekit/lease/leaseapi"
)

// PanicError reports a job that panicked, or another callback of the
// scheduler that panicked (Callback names it: "Schedule.Next" or
// "OnEvent"). The scheduler recovers the panic, releases the run's lease
// and reports the error in an [Event] (a panicking Schedule.Next ends its
// job); the panic never reaches the scheduler's goroutine. It is immutable
// once made and safe for concurrent use. It matches
// leaseapi.ErrInvalidState (the callback broke its contract). Its message
// never contains the panic value, which may hold anything; Value has it.
type PanicError struct {
	// Value is what the callback passed to panic.
	Value any
	// Callback is "" for the job's Run, or "Schedule.Next", "OnEvent".
	Callback string
}

// Error implements error.
func (e *PanicError) Error() string {
	if e.Callback != "" {
		return "lease: scheduler: " + e.Callback + " panicked"
	}
	return "lease: scheduler: job panicked"
}

// Unwrap makes the error match leaseapi.ErrInvalidState.
func (e *PanicError) Unwrap() error { return leaseapi.ErrInvalidState }

// String describes the panic value for logs that may contain it.
func (e *PanicError) String() string {
	if e.Callback != "" {
		return fmt.Sprintf("%s panicked: %v", e.Callback, e.Value)
	}
	return fmt.Sprintf("job panicked: %v", e.Value)
}
