package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the demo and the benchmarks stop every
// goroutine they start.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
