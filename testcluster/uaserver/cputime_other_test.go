//go:build !unix

package uaserver

import (
	"testing"
	"time"
)

// cpuTime skips the test: the process's CPU time is read with getrusage,
// which only Unix has (the packages are vetted for Windows; the tests run
// on Linux).
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	t.Skip("the process's CPU time is read with getrusage (Unix only)")
	return 0
}
