// Package simtest is the test harness of lease: a simulated-time runner
// built on testing/synctest, a fault-injecting backend wrapper, a history
// recorder with safety checkers, a fenced reference resource, and the
// cross-backend conformance suite.
//
// It is the only package of this module that imports testing, and only
// tests import it. Backend packages call [Conformance] from an external
// test package (package memory_test) to avoid an import cycle.
package simtest
