package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the demo and the benchmarks stop every
// goroutine they start. Started by a benchmark as its relay process (the
// soak's), the test binary runs the lab's command line instead.
func TestMain(m *testing.M) {
	if os.Getenv(labChildEnv) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
