// Package procstat reads the process's own memory figures from
// /proc/self/status, for the benchmarks: the Go runtime's figures leave out
// what the process's binary and its C and OS allocations hold.
package procstat

import (
	"os"
	"strconv"
	"strings"
)

// PeakRSS is the process's peak resident set (VmHWM) in MiB. The parent's
// rusage is no good for a child's: a child started with vfork counts the
// parent's memory before the exec in its maximum.
func PeakRSS() float64 { return mib("VmHWM:") }

// CurrentRSS is the process's resident set (VmRSS) in MiB.
func CurrentRSS() float64 { return mib("VmRSS:") }

// mib reads a kB field of /proc/self/status in MiB (0 where there is no
// /proc).
func mib(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
