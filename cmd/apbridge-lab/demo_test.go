package main

import (
	"io"
	"strings"
	"testing"

	"github.com/apbridge/apbridge/internal/testutil"
)

// TestDemoExitsZero runs `apbridge-lab demo` as make demo does.
func TestDemoExitsZero(t *testing.T) {
	var out testutil.SyncBuffer
	if code := run([]string{"demo"}, &out, io.Discard); code != 0 {
		t.Fatalf("demo exited %d:\n%s", code, out.String())
	}
	// The gateway steps: gw-a, the primary, restarts gracefully and gw-b
	// takes over; then gw-b is killed and gw-a takes over again. Each
	// time the stopped gateway comes back as the standby.
	for _, want := range []string{
		"MxGateway switch gw-a -> gw-b, cause session ended by the gateway",
		"MxGateway switch gw-b -> gw-a, cause gateway unreachable",
		"gw-a restarted and is back as the standby",
		"gw-b restarted and is back as the standby",
		"gateway graceful restart of gw-a: switch to gw-b",
		"gateway kill of gw-b: switch to gw-a",
		"OK: no tag update lost",
	} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}
