package runtime

import "unsafe"

// HandleSize is the size of the one allocation that holds a lease's
// Handle and Supervisor.
const HandleSize = unsafe.Sizeof(handleSupervisor{})

// BatchesInFlight is senders, the RenewBatch calls a client has in
// flight at most, for the tests.
const BatchesInFlight = senders
