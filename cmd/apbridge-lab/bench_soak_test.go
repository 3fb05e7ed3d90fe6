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
	got := soakOneCycle(t, 4*time.Minute, false, "--seed", "1")
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

// One cycle of the fleet's soak: three relay processes, every fault kind
// and a relay kill once, the stream checked by identity (counter values,
// whatever relay published them).
func TestSoakFleetShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak starts a cluster, four server pairs and three relay processes")
	}
	got := soakOneCycle(t, 3*time.Minute, true, "--fleet", "--seed", "7")
	for _, field := range []string{"duplicated", "reordered", "dual_owner_ms", "takeovers_unseen"} {
		if got[field] != float64(0) {
			t.Errorf("%s = %v, want 0", field, got[field])
		}
	}
	// Nothing a relay had is lost, except at the kill what the dead relay
	// had not stored: at most the last two ticks of the 50 counters.
	byFault, _ := got["stream_by_fault"].(map[string]any)
	for kind, v := range byFault {
		lost, _ := v.(map[string]any)["lost"].(float64)
		if limit := map[bool]float64{true: 100}[kind == soakRelayKill]; lost > limit {
			t.Errorf("%s: lost %v, want at most %v (examples: %v)", kind, lost, limit, got["lost_examples"])
		}
	}
	// The controls: the counters flowed, and the kill's sources were
	// taken over, each outcome read from the new owner's log. With
	// fleet.handoff (on by default) an OPC UA source's next owner takes
	// the subscription over, and a gateway source's resumes the dead
	// owner's session (the simulated gateway advertises event-resume):
	// no hole either way.
	if n, _ := got["counter_values_checked"].(float64); n < 1000 {
		t.Errorf("%v counter values checked, want at least 1000", got["counter_values_checked"])
	}
	tos, _ := got["takeovers"].([]any)
	if len(tos) == 0 {
		t.Error("no takeover reported")
	}
	for _, x := range tos {
		to, _ := x.(map[string]any)
		src, _ := to["source"].(string)
		switch {
		case to["outcome"] == soakUnknown:
			t.Errorf("takeover of %s: no outcome in the new owner's log (%v)", src, to)
		case to["outcome"] != soakTransferred || to["lost"] != float64(0) || to["unserved"] != float64(0):
			t.Errorf("takeover of %s: %v; want the subscription or session taken over, nothing lost or left unserved", src, to)
		}
	}
	figs, _ := got["relay_figures"].([]any)
	for _, f := range figs {
		fig := f.(map[string]any)
		if gs, ge := fig["goroutines_start"].(float64), fig["goroutines_end"].(float64); gs == 0 || ge > gs {
			t.Errorf("relay %v: goroutines %v at the start, %v at the end", fig["id"], gs, ge)
		}
	}
	if len(figs) != soakRelays {
		t.Errorf("%d relays reported, want %d", len(figs), soakRelays)
	}
}

// soakOneCycle runs one soak cycle on the JetStream sink with the given
// flags and checks that every fault kind (of the fleet's list if fleet)
// was applied once.
func soakOneCycle(t *testing.T, within time.Duration, fleet bool, flags ...string) map[string]any {
	t.Helper()
	args := append([]string{"--json", "--cycles", "1", "--grace", "500ms", "--sink", "jetstream"}, flags...)
	got := benchJSON(t, within, append(args, "soak")...)["soak"]
	if got == nil {
		t.Fatal("no soak result")
	}
	t.Logf("soak: %v", got)
	faults, _ := got["faults"].(map[string]any)
	for _, f := range soakFaults(fleet) {
		if faults[f.name] != float64(1) {
			t.Errorf("fault %s applied %v times, want 1", f.name, faults[f.name])
		}
	}
	return got
}
