// Package procstat reads the process's own memory figures for the
// benchmarks: the resident set from /proc/self/status (the Go runtime's
// figures leave out what the binary and the OS hold) and the Go heap's
// peaks.
package procstat

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// PeakRSS is the process's peak resident set (VmHWM) in MiB. The parent's
// rusage is no good for a child's: a child started with vfork counts the
// parent's memory before the exec in its maximum.
func PeakRSS() float64 { return mib("VmHWM:") }

// CurrentRSS is the process's resident set (VmRSS) in MiB.
func CurrentRSS() float64 { return mib("VmRSS:") }

// RSSAnon is the anonymous part of the resident set (RssAnon) in MiB: the
// heap, stacks and whatever else the process wrote. The rest, RSSFile,
// is file pages mapped from the page cache, mostly the binary's own code
// and read-only data: shared with every process of the binary and given
// back by the kernel under pressure without a write.
func RSSAnon() float64 { return mib("RssAnon:") }

// RSSFile is the file-backed part of the resident set (RssFile) in MiB.
func RSSFile() float64 { return mib("RssFile:") }

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

// HeapPeaks are the largest Go heap figures a sampler saw, in bytes.
type HeapPeaks struct {
	InUse uint64 // HeapInuse
	Sys   uint64 // Sys: all the Go runtime took from the OS
	// RSSAnon is the largest anonymous resident set sampled, in MiB: the
	// kernel keeps a peak of the whole resident set only (VmHWM).
	RSSAnon float64
}

// SampleHeap reads the Go runtime's memory figures every interval on a
// goroutine of its own, until the returned stop, which returns the peaks:
// a process's peak RSS alone does not say where the memory went.
func SampleHeap(every time.Duration) (stop func() HeapPeaks) {
	quit, done := make(chan struct{}), make(chan struct{})
	var peaks HeapPeaks
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-quit:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			peaks.InUse = max(peaks.InUse, ms.HeapInuse)
			peaks.Sys = max(peaks.Sys, ms.Sys)
			peaks.RSSAnon = max(peaks.RSSAnon, RSSAnon())
		}
	}()
	return func() HeapPeaks {
		close(quit)
		<-done
		return peaks
	}
}
