package servicelevel

import (
	"strings"
	"testing"
	"time"
)

// sec turns seconds of the scenario timeline into a Duration.
func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// at is the instant s seconds into the scenario timeline.
func at(s float64) time.Time { return t0.Add(sec(s)) }

// up is a live server at level v; un is a live server whose level cannot
// be read.
func up(v uint8) simNode { return simNode{level: LevelOf(v)} }

var un = simNode{level: Unknown()}

func dead(v uint8) simNode  { return simNode{level: LevelOf(v), state: nodeDead} }
func flaky(v uint8) simNode { return simNode{level: LevelOf(v), state: nodeFlaky} }

// sw is an expected switch: no earlier than at and within 50 ms of it.
type sw struct {
	at    float64
	to    Endpoint
	cause Cause
}

const slack = 50 * time.Millisecond

func near(got time.Duration, want float64) bool {
	return got >= sec(want) && got <= sec(want)+slack
}

// expectations of a scenario; nil slices are not checked, empty ones must
// be empty.
type expect struct {
	switches []sw
	probes   []float64 // when the standby was asked
	// noConnectTo: no connect to this endpoint at or after noConnectAfter
	// (the stopped node must not be retried).
	noConnectTo    *Endpoint
	noConnectAfter float64
	// connects: when connects to the active endpoint start, with their
	// dial timeout (the retry timing).
	connects []connectAt
}

type connectAt struct {
	at   float64
	to   Endpoint
	dial time.Duration
}

func ep(e Endpoint) *Endpoint { return &e }

func slf(window, dwell int) FailoverConfig {
	return FailoverConfig{ServiceLevelFailover: &ServiceLevelFailover{DegradedWindowSeconds: new(window), MinDwellSeconds: new(dwell)}}
}

// blip30 is the Pair's default blip window (blipToleranceMilliseconds).
var blip30 = []PolicyOption{WithBlipWindow(30 * time.Second)}

var disabled = FailoverConfig{ServiceLevelFailover: &ServiceLevelFailover{Enabled: new(false)}}

// TestPolicyRules plays every case of the ServiceLevel-aware failover
// design and its going-away follow-up, and ours, as a timeline against a
// simulated server pair. Every "stays" case has a positive control: the
// probe it asserts did happen, or a neighbouring case with one input
// changed does switch (named "control: ...").
func TestPolicyRules(t *testing.T) {
	const (
		P = Primary
		B = Backup
	)
	fast, slow := 500*time.Millisecond, 10*time.Second
	tests := []struct {
		name    string
		cfg     FailoverConfig
		primary simNode
		backup  simNode
		steps   []step
		until   float64
		want    expect
		opts    []PolicyOption
	}{
		// Failover design: Healthy levels never start a streak.
		{name: "240/250: a 240 active never probes", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 240)}, until: 120,
			want: expect{switches: []sw{}, probes: []float64{}}},
		{name: "250/240: a 250 active never probes", primary: up(250), backup: up(240),
			until: 120, want: expect{switches: []sw{}, probes: []float64{}}},
		{name: "200/250: the bottom of the Healthy band never probes", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 200)}, until: 120,
			want: expect{switches: []sw{}, probes: []float64{}}},
		{name: "control: 199/250 switches after the window", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 199)}, until: 30,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}}, probes: []float64{15}}},

		// Failover design: the degraded window and the peer checks.
		{name: "90/250 switches when the window expires, not before", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90)}, until: 30,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}}, probes: []float64{15}}},
		{name: "90/50 stays and re-probes once per window", primary: up(250), backup: up(50),
			steps: []step{lvl(sec(5), P, 90)}, until: 50,
			want: expect{switches: []sw{}, probes: []float64{15, 25.005, 35.01, 45.015}}},
		{name: "50/90 stays: a higher peer that is not Healthy", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{15, 25.005, 35.01}}},
		{name: "90/199 stays: a peer one below Healthy", primary: up(250), backup: up(199),
			steps: []step{lvl(sec(5), P, 90)}, until: 30,
			want: expect{switches: []sw{}, probes: []float64{15, 25.005}}},
		{name: "control: 90/200 switches", primary: up(250), backup: up(200),
			steps: []step{lvl(sec(5), P, 90)}, until: 30,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}}}},
		{name: "an unreachable peer is never switched to", primary: up(250), backup: up(250),
			steps: []step{kill(sec(1), B), lvl(sec(5), P, 90)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{15, 25.005, 35.01}}},

		{name: "a standby that stopped answering is not switched to on its last live level", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), freeze(sec(14.9), B)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{15, 25.005, 35.01}}},

		// Failover design: unknown samples.
		{name: "an unknown active level never probes", primary: up(250), backup: up(250),
			steps: []step{setLevel(sec(5), P, Unknown())}, until: 60,
			want: expect{switches: []sw{}, probes: []float64{}}},
		{name: "an unknown sample breaks the streak", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), setLevel(sec(12), P, Unknown()), lvl(sec(13), P, 90)}, until: 40,
			want: expect{switches: []sw{{23.005, B, CauseDegradedWindow}}, probes: []float64{23}}},
		{name: "a Healthy sample breaks the streak", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(12), P, 210), lvl(sec(13), P, 90)}, until: 40,
			want: expect{switches: []sw{{23.005, B, CauseDegradedWindow}}, probes: []float64{23}}},

		// Failover design: connect-time preference.
		{name: "connect-time: a session on the Warm standby (90) leaves at once", primary: up(90), backup: up(250),
			until: 30, want: expect{switches: []sw{{0.015, B, CauseConnectPreference}}, probes: []float64{0.01}}},
		{name: "connect-time: a session on a booting node (1) leaves at once", primary: up(1), backup: up(250),
			until: 30, want: expect{switches: []sw{{0.015, B, CauseConnectPreference}}}},
		{name: "connect-time: the first known sample is judged, after unknown ones", primary: un, backup: up(250),
			steps: []step{lvl(sec(3), P, 90)}, until: 30,
			want: expect{switches: []sw{{3.005, B, CauseConnectPreference}}}},
		{name: "connect-time: a Degraded peer keeps the session, the window re-probes", primary: up(90), backup: up(50),
			until: 25, want: expect{switches: []sw{}, probes: []float64{0.01, 10.015, 20.02}}},
		{name: "connect-time: the 250 primary of a healthy pair stays", primary: up(250), backup: up(240),
			until: 30, want: expect{switches: []sw{}, probes: []float64{}}},

		// Failover design: anti-flap dwell.
		{name: "dwell: a second ServiceLevel switch waits out the dwell", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(20), B, 90)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {75.01, P, CauseDegradedWindow}}}},
		{name: "control: dwell 0 lets the second switch happen after its window", cfg: slf(10, 0), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(20), B, 90)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {30.005, P, CauseDegradedWindow}}}},
		{name: "dwell: covers the connect-time check", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(15.0055), B, 90), lvl(sec(15.0055), P, 250)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {75.01, P, CauseConnectPreference}}}},
		{name: "control: without a dwell the connect-time check acts at once", cfg: slf(10, 0), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(15.0055), B, 90), lvl(sec(15.0055), P, 250)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {15.011, P, CauseConnectPreference}}}},

		// Going-away follow-up: the ServiceLevel 0 shortcut.
		{name: "0 skips the window", cfg: slf(30, 60), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 0)}, until: 60,
			want: expect{switches: []sw{{5.005, B, CauseMaintenance}}, probes: []float64{5}}},
		{name: "control: 90 waits the 30 s window", cfg: slf(30, 60), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90)}, until: 60,
			want: expect{switches: []sw{{35.005, B, CauseDegradedWindow}}, probes: []float64{35}}},
		{name: "1 waits the window: the shortcut is for 0 only", cfg: slf(30, 60), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 1)}, until: 60,
			want: expect{switches: []sw{{35.005, B, CauseDegradedWindow}}, probes: []float64{35}}},
		{name: "90 then 0 in one streak: the 0 moves the connection", cfg: slf(30, 60), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(10), P, 0)}, until: 60,
			want: expect{switches: []sw{{10.005, B, CauseMaintenance}}, probes: []float64{10}}},
		{name: "0 with a Degraded peer probes once per streak, then once per window", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0)}, until: 30,
			want: expect{switches: []sw{}, probes: []float64{5, 15.005, 25.01}}},
		{name: "0 with a Degraded peer that then promotes: switched at its rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(8), B, 250)}, until: 30,
			want: expect{switches: []sw{{8.005, B, CauseStandbyHealthy}}, probes: []float64{5, 8}}},
		{name: "0 inside the dwell waits, then switches", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(30), B, 0)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {75.01, P, CauseMaintenance}}}},
		{name: "control: 0 after the dwell switches at once", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(80), B, 0)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {80.005, P, CauseMaintenance}}}},

		// Going-away follow-up: a lost link after a degraded level.
		{name: "lost link after a degraded level: a Healthy peer is switched to at zero delay", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 50), kill(sec(8), P)}, until: 40,
			want: expect{switches: []sw{{8.005, B, CauseLostLinkDegraded}}, probes: []float64{8},
				noConnectTo: ep(P), noConnectAfter: 5}},
		{name: "lost link after a degraded level: a Degraded peer, then the ordinary retry cycle", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), kill(sec(8), P)}, until: 40,
			// On the 90 backup the dead primary is then probed once per window.
			want: expect{switches: []sw{{23.003, B, CauseRetriesExhausted}}, probes: []float64{8, 23.004, 33.009},
				connects: []connectAt{{0, P, slow}, {13, P, slow}, {18.001, P, slow}, {23.002, P, slow}}}},
		{name: "control: the same lost link after 0 with a Healthy peer switches at zero delay", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), lvl(sec(7), B, 250), kill(sec(8), P)}, until: 40,
			want: expect{switches: []sw{{8.005, B, CauseLostLinkDegraded}}, probes: []float64{8}}},
		{name: "QA sequence: Degraded, unknown, link lost makes no connect to the stopped node", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 50), setLevel(sec(8), P, Unknown()), kill(sec(9), P)}, until: 40,
			want: expect{switches: []sw{{9.005, B, CauseLostLinkDegraded}}, probes: []float64{9},
				noConnectTo: ep(P), noConnectAfter: 5}},
		{name: "QA graceful stop, peer promoted first: the 0 switches at once", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(9.9), B, 250), lvl(sec(10), P, 0), setLevel(sec(16), P, Unknown()), kill(sec(17), P)}, until: 40,
			want: expect{switches: []sw{{10.005, B, CauseMaintenance}}, probes: []float64{10}, noConnectTo: ep(P), noConnectAfter: 10}},
		{name: "QA graceful stop, peer promoted after the 0: switched at the rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(10), P, 0), lvl(sec(10.2), B, 250), setLevel(sec(16), P, Unknown()), kill(sec(17), P)}, until: 40,
			want: expect{switches: []sw{{10.205, B, CauseStandbyHealthy}}, probes: []float64{10, 10.2}, noConnectTo: ep(P), noConnectAfter: 10}},
		{name: "lost link inside the dwell: retries, no probe", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(20), B, 50), freeze(sec(22), B)}, until: 40,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {24.7, P, CauseRetriesExhausted}}, probes: []float64{15},
				connects: []connectAt{{0, P, slow}, {23, B, fast}, {23.6, B, fast}, {24.2, B, fast}}}},
		{name: "a refusal inside the dwell moves at once: the dwell holds ServiceLevel switches only", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(20), B, 50), kill(sec(22), B)}, until: 40,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {22.001, P, CauseRefused}}, probes: []float64{15},
				connects: []connectAt{{0, P, slow}, {22, B, fast}}}},
		{name: "control: the same lost link after the dwell probes and switches at once", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 250), lvl(sec(76), B, 50), kill(sec(78), B)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {78.005, P, CauseLostLinkDegraded}}, probes: []float64{15, 78}}},

		// A lost link after only Healthy levels: retry the same endpoint first.
		{name: "a blip on a 250 primary reconnects to it, not to the 240 secondary", primary: up(250), backup: up(240),
			steps: []step{blip(sec(10), P)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{},
				connects: []connectAt{{0, P, slow}, {10, P, fast}}}},
		{name: "a hard kill after Healthy levels: refused, the Healthy standby is promoted at once", primary: up(250), backup: up(240),
			steps: []step{kill(sec(10), P)}, until: 40,
			want: expect{switches: []sw{{10.001, B, CauseRefused}}, probes: []float64{},
				connects: []connectAt{{0, P, slow}, {10, P, fast}}}},
		{name: "a hard kill with a standby that is not Healthy: the slow retries", primary: up(250), backup: up(90),
			steps: []step{kill(sec(10), P)}, until: 40,
			want: expect{switches: []sw{{25.003, B, CauseRetriesExhausted}}, probes: []float64{25.004, 35.009},
				connects: []connectAt{{0, P, slow}, {15, P, slow}, {20.001, P, slow}, {25.002, P, slow}}}},
		{name: "a standby turning Healthy shortens the slow wait", primary: up(250), backup: up(90),
			steps: []step{kill(sec(10), P), lvl(sec(11), B, 250)}, until: 40,
			want: expect{switches: []sw{{11.001, B, CauseRefused}},
				connects: []connectAt{{0, P, slow}, {11, P, fast}}}},
		{name: "a frozen link after Healthy levels: detected, fast retries time out, failover", primary: up(250), backup: up(240),
			steps: []step{freeze(sec(10), P)}, until: 40,
			want: expect{switches: []sw{{12.7, B, CauseRetriesExhausted}}, probes: []float64{},
				connects: []connectAt{{0, P, slow}, {11, P, fast}, {11.6, P, fast}, {12.2, P, fast}}}},
		{name: "a session that delivers a sample resets the failed-attempt count", primary: up(250), backup: up(90), opts: blip30,
			steps: []step{kill(sec(10), P), revive(sec(10.15), P, 250), kill(sec(20), P)}, until: 40,
			want: expect{switches: []sw{{20.203, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {10, P, slow}, {10.101, P, slow}, {10.202, P, slow}, {20, P, slow}, {20.101, P, slow}, {20.202, P, slow}}}},
		{name: "a dead primary at startup is left at its refusal", primary: dead(250), backup: up(250),
			until: 10, want: expect{switches: []sw{{0.001, B, CauseRefused}},
				connects: []connectAt{{0, P, slow}}}},
		{name: "a dead primary at startup with a standby that is not Healthy is left after the retry count", primary: dead(250), backup: up(90),
			until: 20, want: expect{switches: []sw{{10.003, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {5.001, P, slow}, {10.002, P, slow}}}},
		{name: "sessions dropped before their first sample count as failed attempts", primary: flaky(250), backup: up(250),
			until: 10, want: expect{switches: []sw{{0.233, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {0.111, P, fast}, {0.222, P, fast}}}},

		// Disabled: the connectivity failover that predates ServiceLevel, exactly.
		{name: "disabled: never probes or switches on ServiceLevel", cfg: disabled, primary: up(90), backup: up(250),
			steps: []step{lvl(sec(10), P, 0)}, until: 120,
			want: expect{switches: []sw{}, probes: []float64{}}},
		{name: "disabled: a lost link after 0 retries slowly, then fails over", cfg: disabled, primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 0), kill(sec(8), P)}, until: 40,
			want: expect{switches: []sw{{23.003, B, CauseRetriesExhausted}}, probes: []float64{},
				connects: []connectAt{{0, P, slow}, {13, P, slow}, {18.001, P, slow}, {23.002, P, slow}}}},
		{name: "disabled: a hard kill with a Healthy standby still retries slowly", cfg: disabled, primary: up(250), backup: up(240),
			steps: []step{kill(sec(10), P)}, until: 40,
			want: expect{switches: []sw{{25.003, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {15, P, slow}, {20.001, P, slow}, {25.002, P, slow}}}},
		{name: "control: enabled, the same timeline switches at the 0", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 0), kill(sec(8), P)}, until: 40,
			want: expect{switches: []sw{{5.005, B, CauseMaintenance}}, noConnectTo: ep(P), noConnectAfter: 1}},
		{name: "a link lost while the 0's probe is out: its answer serves the lost link", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 0), blip(sec(5.001), P)}, until: 40,
			want: expect{switches: []sw{{5.005, B, CauseLostLinkDegraded}}, probes: []float64{5}, noConnectTo: ep(P), noConnectAfter: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.cfg, tt.primary, tt.backup, tt.opts...)
			w.run(sec(tt.until), tt.steps...)
			checkExpect(t, w, tt.want)
		})
	}
}

func checkExpect(t *testing.T, w *world, want expect) {
	t.Helper()
	if want.switches != nil {
		got := w.actions(ActionSwitch)
		ok := len(got) == len(want.switches)
		for i := 0; ok && i < len(got); i++ {
			s := want.switches[i]
			ok = near(got[i].at, s.at) && got[i].d.To == s.to && got[i].d.Cause == s.cause
		}
		if !ok {
			t.Errorf("switches = %v, want %v; trace:%s", got, want.switches, w.dump())
		}
	}
	if want.probes != nil {
		got := w.actions(ActionProbe)
		ok := len(got) == len(want.probes)
		for i := 0; ok && i < len(got); i++ {
			ok = near(got[i].at, want.probes[i])
		}
		if !ok {
			t.Errorf("probes = %v, want at %v; trace:%s", got, want.probes, w.dump())
		}
	}
	if want.noConnectTo != nil {
		if got := w.connectsTo(*want.noConnectTo, sec(want.noConnectAfter)); len(got) > 0 {
			t.Errorf("connects to %s after %vs = %v, want none; trace:%s", *want.noConnectTo, want.noConnectAfter, got, w.dump())
		}
	}
	if want.connects != nil {
		got := w.actions(ActionConnect)
		ok := len(got) == len(want.connects)
		for i := 0; ok && i < len(got); i++ {
			c := want.connects[i]
			ok = near(got[i].at, c.at) && got[i].d.To == c.to && got[i].d.DialTimeout == c.dial
		}
		if !ok {
			t.Errorf("connects = %v, want %v; trace:%s", got, want.connects, w.dump())
		}
	}
}

// TestPolicyUnknownKeepsLastKnownLevel checks the state behind the QA
// sequence directly: an unknown sample ends the streak but the level a lost
// link is judged on is still the last one read.
func TestPolicyUnknownKeepsLastKnownLevel(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	now := t0
	p.Start(now)
	p.SessionUp(now)
	p.ActiveLevel(now, LevelOf(250))
	p.ActiveLevel(now.Add(sec(5)), LevelOf(50))
	if st := p.Status(); st.DegradedSince != now.Add(sec(5)) {
		t.Fatalf("DegradedSince = %v, want the 50 sample", st.DegradedSince)
	}
	d := p.ActiveLevel(now.Add(sec(6)), Unknown())
	st := p.Status()
	if st.ActiveLevel != LevelOf(50) {
		t.Errorf("ActiveLevel after an unknown sample = %v, want 50", st.ActiveLevel)
	}
	if !st.DegradedSince.IsZero() {
		t.Errorf("streak still running after an unknown sample")
	}
	if !hasObservation(d, StreakCleared, CauseUnknownSample) {
		t.Errorf("no StreakCleared(unknown sample) in %v", d.Observations)
	}
	d = p.LinkLost(now.Add(sec(7)))
	if d.Action != ActionProbe || d.Cause != CauseLostLinkDegraded || d.ActiveLevel != LevelOf(50) {
		t.Fatalf("LinkLost = %+v, want a lost-link probe judged on 50", d)
	}
}

// TestPolicyProbeAnswersAreFenced: an answer that does not quote the
// outstanding probe (an old session's, a duplicate) changes nothing.
func TestPolicyProbeAnswersAreFenced(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	now := t0
	p.Start(now)
	p.SessionUp(now)
	d := p.ActiveLevel(now, LevelOf(90))
	if d.Action != ActionProbe {
		t.Fatalf("first sample 90: %v, want a probe", d)
	}
	for _, id := range []ProbeID{0, d.Probe + 1} {
		if got := p.ProbeResult(now, id, LevelOf(250)); got.Action != ActionNone {
			t.Errorf("ProbeResult(%d) for outstanding %d = %v, want nothing", id, d.Probe, got)
		}
	}
	if got := p.ProbeResult(now, d.Probe, LevelOf(250)); got.Action != ActionSwitch {
		t.Fatalf("ProbeResult(%d) = %v, want a switch", d.Probe, got)
	}
	if got := p.ProbeResult(now, d.Probe, LevelOf(250)); got.Action != ActionNone {
		t.Errorf("a second answer to the same probe = %v, want nothing", got)
	}
}

// TestPolicyStaleAnswerAfterRecovery: a Healthy sample while a probe is out
// makes its answer moot.
func TestPolicyStaleAnswerAfterRecovery(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	p.Start(t0)
	p.SessionUp(t0)
	d := p.ActiveLevel(t0, LevelOf(90))
	p.ActiveLevel(t0.Add(sec(1)), LevelOf(250))
	got := p.ProbeResult(t0.Add(sec(1)), d.Probe, LevelOf(250))
	if got.Action != ActionNone || got.Cause != CauseStreakBroken {
		t.Errorf("answer after recovery = %+v, want a stay because the streak ended", got)
	}
}

// TestPolicyAnswerBelongsToItsStreak: a streak that ended and restarted
// while the probe was out waits for its own window; the old answer does not
// move the connection.
func TestPolicyAnswerBelongsToItsStreak(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	p.Start(at(0))
	p.SessionUp(at(0))
	p.ActiveLevel(at(0), LevelOf(250))
	p.ActiveLevel(at(5), LevelOf(90))
	d := p.Tick(at(15))
	if d.Action != ActionProbe {
		t.Fatalf("Tick at the window = %v, want a probe", d)
	}
	p.ActiveLevel(at(15.001), LevelOf(250))
	p.ActiveLevel(at(15.002), LevelOf(90))
	if got := p.ProbeResult(at(15.005), d.Probe, LevelOf(250)); got.Action != ActionNone || got.Cause != CauseStreakBroken {
		t.Fatalf("answer to the previous streak's probe = %+v, want a stay", got)
	}
	if dl, ok := p.NextDeadline(); !ok || !dl.Equal(at(25.002)) {
		t.Fatalf("NextDeadline = %v, %v; want the new streak's window at 25.002 s", dl.Sub(t0), ok)
	}
	if d = p.Tick(at(25.002)); d.Action != ActionProbe {
		t.Fatalf("Tick at the new window = %v, want a probe", d)
	}
	if got := p.ProbeResult(at(25.003), d.Probe, LevelOf(250)); got.Action != ActionSwitch || got.Cause != CauseDegradedWindow {
		t.Fatalf("answer = %v, want a switch", got)
	}
}

// TestPolicyIgnoresEventsOutOfState: late callbacks racing a switch or a
// lost link are harmless.
func TestPolicyIgnoresEventsOutOfState(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	none := func(what string, d Decision) {
		t.Helper()
		if d.Action != ActionNone {
			t.Errorf("%s = %v, want nothing", what, d)
		}
	}
	none("sample before Start", p.ActiveLevel(t0, LevelOf(0)))
	none("SessionUp before Start", p.SessionUp(t0))
	none("LinkLost before Start", p.LinkLost(t0))
	none("ConnectFailed before Start", p.ConnectFailed(t0))
	if d := p.Start(t0); d.Action != ActionConnect || d.To != Primary || d.Cause != CauseStartup {
		t.Fatalf("Start = %v", d)
	}
	none("second Start", p.Start(t0))
	none("sample while connecting", p.ActiveLevel(t0, LevelOf(0)))
	none("LinkLost while connecting", p.LinkLost(t0))
	p.SessionUp(t0)
	none("second SessionUp", p.SessionUp(t0))
	none("ConnectFailed with a live session", p.ConnectFailed(t0))
	if _, ok := p.NextDeadline(); ok {
		t.Errorf("a healthy idle session has a deadline")
	}
}

// TestPolicyObservations checks what the supervisor turns into user events
// and log lines, along the QA timeline of the going-away follow-up.
func TestPolicyObservations(t *testing.T) {
	p := mustPolicy(t, FailoverConfig{})
	p.StandbyLevel(at(0), LevelOf(90))
	p.Start(at(0))
	p.SessionUp(at(0))
	d := p.ActiveLevel(at(0), LevelOf(250))
	if !hasObservation(d, ActiveBandChanged, CauseNone) || d.Observations[0].To != BandHealthy {
		t.Errorf("first sample: %v, want the band reported", d.Observations)
	}
	if d = p.ActiveLevel(at(2), LevelOf(250)); len(d.Observations) != 0 {
		t.Errorf("an unchanged sample observed %v", d.Observations)
	}
	d = p.ActiveLevel(at(4), LevelOf(0))
	if d.Action != ActionProbe || d.Cause != CauseMaintenance {
		t.Fatalf("0 = %v, want the shortcut probe", d)
	}
	kinds := []ObservationKind{ActiveBandChanged, StreakStarted, ProbeAsked}
	if !sameKinds(d.Observations, kinds) {
		t.Errorf("observations of the 0 = %v, want %v", d.Observations, kinds)
	}
	if got, want := d.String(), "probe backup (ServiceLevel 0)"; got != want {
		t.Errorf("probe String = %q, want %q", got, want)
	}
	d = p.ProbeResult(at(4), d.Probe, LevelOf(250))
	if d.Action != ActionSwitch {
		t.Fatalf("answer 250 = %v, want a switch", d)
	}
	if got, want := d.String(), "failover from primary to backup (ServiceLevel 0; backup reports 250)"; got != want {
		t.Errorf("switch String = %q, want %q", got, want)
	}
	if !sameKinds(d.Observations, []ObservationKind{ProbeAnswered, StandbyBandChanged, StreakCleared}) {
		t.Errorf("observations of the switch = %v", d.Observations)
	}
	if p.Active() != Backup || p.Status().DwellUntil != at(64) {
		t.Errorf("after the switch: active %v, dwell until %v", p.Active(), p.Status().DwellUntil)
	}

	// On the backup, a 0 inside the dwell is held, then acts.
	p.SessionUp(at(4))
	p.ActiveLevel(at(4), LevelOf(250))
	p.StandbyLevel(at(5), LevelOf(250))
	d = p.ActiveLevel(at(10), LevelOf(0))
	if d.Action != ActionNone || !hasObservation(d, TriggerDeferred, CauseMaintenance) {
		t.Fatalf("0 inside the dwell = %v %v, want a deferral", d, d.Observations)
	}
	if dl, ok := p.NextDeadline(); !ok || !dl.Equal(at(64)) {
		t.Fatalf("NextDeadline = %v %v, want the dwell end", dl, ok)
	}
	if d = p.Tick(at(63)); d.Action != ActionNone {
		t.Fatalf("Tick before the dwell end = %v", d)
	}
	if d = p.Tick(at(64)); d.Action != ActionProbe || d.Cause != CauseMaintenance || d.To != Primary {
		t.Fatalf("Tick at the dwell end = %v, want the held probe", d)
	}
	d = p.ProbeResult(at(64), d.Probe, LevelOf(90))
	if d.Action != ActionNone || d.Cause != CausePeerNotHealthy {
		t.Fatalf("answer 90 = %+v, want a stay", d)
	}
	if got, want := d.String(), "stay on backup (peer not Healthy; primary reports 90)"; got != want {
		t.Errorf("stay String = %q, want %q", got, want)
	}

	// A lost link with a non-Healthy peer: probe, then retries.
	d = p.LinkLost(at(70))
	if d.Action != ActionProbe || d.Cause != CauseLostLinkDegraded {
		t.Fatalf("LinkLost after 0 = %v, want a probe", d)
	}
	d = p.ProbeResult(at(71), d.Probe, Unknown())
	if d.Cause != CausePeerUnknown || !hasObservation(d, RetryScheduled, CauseLinkLost) {
		t.Fatalf("unreachable answer = %+v %v, want a stay and a retry", d, d.Observations)
	}
	if got := d.Observations[len(d.Observations)-1]; !got.Until.Equal(at(75)) || got.Fast || got.Attempt != 1 {
		t.Errorf("retry = %+v, want attempt 1 at 75 s, slow (the probe's second counts against the 5 s)", got)
	}
	d = p.Tick(at(75))
	if d.Action != ActionConnect || d.To != Backup || d.DialTimeout != 10*time.Second || d.Attempt != 1 {
		t.Fatalf("retry = %+v", d)
	}
	if got, want := d.String(), "connect backup (reconnect, attempt 1, dial timeout 10s)"; got != want {
		t.Errorf("connect String = %q, want %q", got, want)
	}
	for _, o := range []Observation{
		{Kind: ActiveBandChanged, Endpoint: Primary, Level: LevelOf(90), From: BandHealthy, To: BandDegraded},
		{Kind: StreakCleared, Endpoint: Backup, Cause: CauseHealthySample},
		{Kind: RetryScheduled, Endpoint: Backup, Cause: CauseConnectFailed, Attempt: 2, Fast: true, Until: at(1)},
	} {
		if o.String() == "" || strings.HasPrefix(o.String(), "ObservationKind") {
			t.Errorf("Observation %v renders as %q", o.Kind, o.String())
		}
	}
}

func TestDecisionStrings(t *testing.T) {
	tests := []struct {
		d    Decision
		want string
	}{
		{Decision{}, ""},
		{Decision{Action: ActionSwitch, Cause: CauseDegradedWindow, From: Primary, To: Backup, ActiveLevel: LevelOf(90), PeerLevel: LevelOf(250), DegradedFor: sec(10.004)},
			"failover from primary to backup (ServiceLevel 90 Degraded for 10s; backup reports 250)"},
		{Decision{Action: ActionSwitch, Cause: CauseConnectPreference, From: Backup, To: Primary, ActiveLevel: LevelOf(50), PeerLevel: LevelOf(250)},
			"failover from backup to primary (connect-time preference, ServiceLevel 50; primary reports 250)"},
		{Decision{Action: ActionSwitch, Cause: CauseLostLinkDegraded, From: Primary, To: Backup, ActiveLevel: LevelOf(0), PeerLevel: LevelOf(250)},
			"failover from primary to backup (lost link after ServiceLevel 0; backup reports 250)"},
		{Decision{Action: ActionSwitch, Cause: CauseRetriesExhausted, From: Primary, To: Backup, FailedAttempts: 3},
			"failover from primary to backup (3 connect attempts failed; backup level unknown)"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestInvalidConfigIsRefused(t *testing.T) {
	if _, err := NewPolicy(FailoverConfig{FailoverRetryCount: new(0)}); err == nil {
		t.Fatal("NewPolicy accepted failoverRetryCount 0")
	}
}

func mustPolicy(t *testing.T, cfg FailoverConfig) *Policy {
	t.Helper()
	p, err := NewPolicy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func hasObservation(d Decision, k ObservationKind, c Cause) bool {
	for _, o := range d.Observations {
		if o.Kind == k && (c == CauseNone || o.Cause == c) {
			return true
		}
	}
	return false
}

func sameKinds(obs []Observation, want []ObservationKind) bool {
	if len(obs) != len(want) {
		return false
	}
	for i := range obs {
		if obs[i].Kind != want[i] {
			return false
		}
	}
	return true
}
