//go:build !unix

package procstat

import "time"

// CPUTime is 0 here: the benchmarks that read it run on Linux.
func CPUTime() time.Duration { return 0 }
