//go:build race

package runtime_test

// raceAllocs is the allocations the race detector adds to a pair.
const raceAllocs = 1
