package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// asBinary, set in a test process's environment, makes the test binary
// the apbridge binary: a test starts itself again with it to run the
// relay as a process of its own (signals, systemd's environment, an exit
// status), without building anything.
const asBinary = "APBRIDGE_TEST_AS_BINARY"

// TestMain checks that the relay stops every goroutine it starts; in a
// process started with asBinary it is the apbridge command instead.
func TestMain(m *testing.M) {
	if os.Getenv(asBinary) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	goleak.VerifyTestMain(m)
}
