//go:build leasemutant

package mutant

import "os"

var active = os.Getenv("LEASE_MUTANT")

// On reports whether the named mutant is the one LEASE_MUTANT selects.
func On(name string) bool { return active == name }
