package main

import (
	"testing"
	"time"
)

// One cycle of the soak on the JetStream sink, so that the path stays
// green: every fault kind once, with the relay in a process of its own
// (this test binary, see TestMain), the stream audited and the
// subscriber's view checked. `make soak` runs it long; the figures are in
// docs/reliability.md.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak starts a cluster, two server pairs and a relay process")
	}
	got := benchJSON(t, 4*time.Minute, "--json", "--cycles", "1", "--grace", "500ms", "--sink", "jetstream", "--seed", "1", "soak")["soak"]
	if got == nil {
		t.Fatal("no soak result")
	}
	t.Logf("soak: %v", got)
	faults, _ := got["faults"].(map[string]any)
	for _, f := range soakFaults(false) {
		if faults[f.name] != float64(1) {
			t.Errorf("fault %s applied %v times, want 1", f.name, faults[f.name])
		}
	}
	// The stream is the truth with this sink: every update the relay
	// produced stored once, in order.
	for _, field := range []string{"lost", "duplicated", "reordered"} {
		if got[field] != float64(0) {
			t.Errorf("%s = %v, want 0 (examples: %v)", field, got[field], got["lost_examples"])
		}
	}
	// The control: updates flowed, so a loss had something to show in.
	if n, _ := got["updates"].(float64); n < 500 {
		t.Errorf("%v updates, want at least 500", got["updates"])
	}
	if gs, ge := got["goroutines_start"].(float64), got["goroutines_end"].(float64); gs == 0 || ge > gs {
		t.Errorf("relay goroutines %v at the start, %v at the end", gs, ge)
	}
}
