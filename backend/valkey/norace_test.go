//go:build !race

package valkey_test

// raceAllocs is the allocations the race detector adds to one operation.
const raceAllocs = 0
