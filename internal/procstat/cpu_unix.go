//go:build unix

package procstat

import (
	"time"

	"golang.org/x/sys/unix"
)

// CPUTime is the user and system CPU time the process has used so far, all
// its threads together. A benchmark takes it at both ends of a window, so
// that start-up (subscribing ten thousand items) does not count.
func CPUTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
