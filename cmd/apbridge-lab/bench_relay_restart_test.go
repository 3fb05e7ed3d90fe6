package main

import (
	"slices"
	"testing"
	"time"

	"github.com/apbridge/apbridge/wire"
)

// relay-restart, tiny, so that the path stays green: a relay process
// killed and started again once, the stream audited. Today's relay loses
// what the servers produced while no process ran a session (issue 28);
// the test checks that the bench sees that hole and nothing else.
func TestRelayRestartShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster, an OPC UA pair and a relay process")
	}
	got := benchJSON(t, 90*time.Second, "--json", "--runs", "1", "--tags", "2", "--grace", "500ms", "relay-restart")["relay-restart"]
	if got == nil {
		t.Fatal("no relay-restart result")
	}
	t.Logf("relay-restart: %v", got)
	if got["runs"] != float64(1) || got["sink"] != soakSinkJetStream {
		t.Errorf("runs %v, sink %v: want 1 run on the JetStream sink", got["runs"], got["sink"])
	}
	for _, field := range []string{"duplicated", "reordered"} {
		if got[field] != float64(0) {
			t.Errorf("%s = %v, want 0", field, got[field])
		}
	}
	// The controls: values flowed before and after the restart, and the
	// restart was seen for what it was (a new subscription, or one taken
	// over).
	if n, _ := got["counter_values_checked"].(float64); n < 40 {
		t.Errorf("%v counter values checked, want at least 40", got["counter_values_checked"])
	}
	if _, ok := got["restart_gap_ms_p50"].(float64); !ok {
		t.Error("no restart gap: no value came after the restart")
	}
	ns, _ := got["new_subscriptions"].(float64)
	tr, _ := got["transferred"].(float64)
	if ns+tr != 1 {
		t.Errorf("new_subscriptions %v + transferred %v, want 1 run", ns, tr)
	}
	// Without stateDir the relay cannot take its subscriptions over: the
	// restart is a new subscription, and what the servers produced while
	// no process ran a session is lost. The positive controls of the
	// check for a transfer and for a hole.
	if got["state_dir"] == false {
		if ns != 1 {
			t.Errorf("without stateDir: new_subscriptions %v, want 1", ns)
		}
		if n, _ := got["lost_at_restart"].(float64); n == 0 {
			t.Error("without stateDir: nothing lost at the restart, want the values of the pause")
		}
	}
	// With stateDir the successor takes the data subscription over and
	// asks for what the server held: nothing lost at the restart, no
	// new subscription, and the relay counts the transfer.
	if got["state_dir"] == true {
		if tr != 1 || got["relay_transfers"] != float64(1) {
			t.Errorf("with stateDir: transferred %v, relay_transfers %v; want 1, 1", tr, got["relay_transfers"])
		}
		if n, _ := got["lost_at_restart"].(float64); n != 0 {
			t.Errorf("with stateDir: %v values lost at the restart, want 0", n)
		}
	}
	// A server may skip a tick now and then (a late sample finds two):
	// source_values_skipped, reported, not judged here.
}

// The audit by counter values: holes, copies and order, a hole charged to
// the run whose kill it spans.
func TestRRAuditCounters(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	runs := []rrRestart{{killAt: at(1000), restartAt: at(2000)}}
	obs := func(vals ...int64) []rrObs {
		var out []rrObs
		for i, v := range vals {
			// Values after 1000 are stored after the restart.
			ms := i * 100
			if v >= 10 {
				ms = 2100 + i*100
			}
			out = append(out, rrObs{subject: "rr.s.C", value: v, counter: true, at: at(ms)})
		}
		return out
	}
	cases := []struct {
		name                         string
		obs                          []rrObs
		lost, dup, reordered, steady uint64
		lostByRun                    []uint64
	}{
		{"whole", obs(1, 2, 3, 10, 11), 6, 0, 0, 0, []uint64{6}},
		{"nothing lost", obs(1, 2, 3, 4, 5), 0, 0, 0, 0, []uint64{0}},
		{"steady hole", obs(1, 3, 4), 1, 0, 0, 1, []uint64{0}},
		{"copy", obs(1, 2, 2, 3), 0, 1, 0, 0, []uint64{0}},
		{"reordered", obs(1, 3, 2, 4), 0, 0, 1, 0, []uint64{0}},
		{"not a counter", append(obs(1, 2), rrObs{subject: "rr.s.Static", at: at(500)}), 0, 0, 0, 0, []uint64{0}},
	}
	for _, c := range cases {
		a := rrAuditCounters(c.obs, runs, nil)
		if a.Lost != c.lost || a.Duplicated != c.dup || a.Reordered != c.reordered || a.LostSteady != c.steady || !slices.Equal(a.LostByRun, c.lostByRun) {
			t.Errorf("%s: lost %d (steady %d, by run %v), duplicated %d, reordered %d; want %d (%d, %v), %d, %d",
				c.name, a.Lost, a.LostSteady, a.LostByRun, a.Duplicated, a.Reordered, c.lost, c.steady, c.lostByRun, c.dup, c.reordered)
		}
	}
	// The same value in another status is another update, not a copy.
	bad := obs(1, 2)
	bad = append(bad, rrObs{subject: "rr.s.C", value: 2, counter: true, status: wire.StatusCode(0x808D0000), at: at(300)})
	if a := rrAuditCounters(bad, runs, nil); a.Duplicated != 0 || a.Lost != 0 {
		t.Errorf("a value again in another status: duplicated %d, lost %d; want 0, 0", a.Duplicated, a.Lost)
	}
}

// A hole inside one relay process is judged by its sequence numbers:
// numbers that run on mean the source never delivered the values (a
// server's sample that found two ticks); missing numbers, that the relay
// lost what it had. Across processes (another epoch) the numbers say
// nothing.
func TestRRAuditSourceSkipped(t *testing.T) {
	t0 := time.Unix(1000, 0)
	type u struct {
		v     int64
		epoch string
		seq   uint64
	}
	cases := []struct {
		name                  string
		us                    []u
		lost, steady, skipped uint64
	}{
		{"numbers run on", []u{{1, "e1", 1}, {2, "e1", 2}, {4, "e1", 3}, {5, "e1", 4}}, 0, 0, 1},
		{"a number missing", []u{{1, "e1", 1}, {2, "e1", 2}, {4, "e1", 4}}, 1, 1, 0},
		{"one of two had", []u{{1, "e1", 1}, {4, "e1", 3}}, 1, 1, 1},
		{"another process", []u{{1, "e1", 1}, {3, "e2", 1}}, 1, 1, 0},
		{"no numbers", []u{{1, "", 0}, {3, "", 0}}, 1, 1, 0},
	}
	for _, c := range cases {
		var obs []rrObs
		for i, x := range c.us {
			obs = append(obs, rrObs{subject: "rr.s.C", value: x.v, counter: true, epoch: x.epoch, seq: x.seq, at: t0.Add(time.Duration(i) * 100 * time.Millisecond)})
		}
		a := rrAuditCounters(obs, nil, nil)
		if a.Lost != c.lost || a.LostSteady != c.steady || a.Skipped != c.skipped {
			t.Errorf("%s: lost %d (steady %d), skipped %d; want %d (%d), %d", c.name, a.Lost, a.LostSteady, a.Skipped, c.lost, c.steady, c.skipped)
		}
	}
}

// A lost value the subscriber saw published is the stream's loss.
func TestRRAuditLostPublished(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var obs []rrObs
	for i, v := range []int64{1, 2, 6, 7} {
		obs = append(obs, rrObs{subject: "rr.s.C", value: v, counter: true, at: t0.Add(time.Duration(i) * time.Second)})
	}
	published := func(subject string, v int64) bool { return subject == "rr.s.C" && (v == 3 || v == 4) }
	if a := rrAuditCounters(obs, nil, published); a.Lost != 3 || a.LostPublished != 2 {
		t.Errorf("lost %d, published %d; want 3, 2", a.Lost, a.LostPublished)
	}
}

// A run's view: a refresh or the static tag after the restart makes it a
// new subscription's; neither, one taken over.
func TestRRViewRun(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	r := rrRestart{killAt: at(1000), restartAt: at(2000)}
	stored := []rrObs{
		{subject: "rr.s.C", value: 1, counter: true, at: at(900)},
		{subject: "rr.s.C", value: 12, counter: true, at: at(2150)},
	}
	const static = "rr.s.Static"
	cases := []struct {
		name            string
		published       []rrObs
		refresh, newSub bool
	}{
		{"taken over", stored, false, false},
		{"static again", append(slices.Clone(stored), rrObs{subject: static, at: at(2100)}), false, true},
		{"static before the kill", append(slices.Clone(stored), rrObs{subject: static, at: at(500)}), false, false},
		{"refresh", append(slices.Clone(stored), rrObs{subject: "rr.s.C", refresh: true, at: at(2100)}), true, false},
		{"after the next kill", append(slices.Clone(stored), rrObs{subject: static, at: at(6000)}), false, false},
	}
	for _, c := range cases {
		v := rrViewRun(r, at(5000), stored, c.published, static)
		if v.refresh != c.refresh || v.newSub != c.newSub {
			t.Errorf("%s: refresh %v, new subscription %v; want %v, %v", c.name, v.refresh, v.newSub, c.refresh, c.newSub)
		}
		if !v.flowed || v.gap != 150*time.Millisecond || v.outage != 1150*time.Millisecond || v.silence != 1250*time.Millisecond {
			t.Errorf("%s: flowed %v, gap %v, outage %v, silence %v; want true, 150ms, 1.15s, 1.25s", c.name, v.flowed, v.gap, v.outage, v.silence)
		}
	}
}

// A relay that counts transfers is read by any field naming them; one
// that does not, reported as such.
func TestRRTransferCount(t *testing.T) {
	if n, ok := rrTransferCount([]any{map[string]any{"refreshes": 1.0}}); ok || n != 0 {
		t.Errorf("no transfer field: %d, %v; want 0, false", n, ok)
	}
	if n, ok := rrTransferCount([]any{map[string]any{"subscriptionTransfers": 2.0, "refreshes": 1.0}, map[string]any{"transferred": 1.0}}); !ok || n != 3 {
		t.Errorf("transfer fields: %d, %v; want 3, true", n, ok)
	}
}
