package faultproxy

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if any goroutine outlives the tests: every proxy
// and echo server started here must be stopped by its Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
