package runtime

// BatchesInFlight is senders, the RenewBatch calls a client has in
// flight at most, for the tests.
const BatchesInFlight = senders
