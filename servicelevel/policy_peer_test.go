package servicelevel

import (
	"testing"
	"time"
)

// TestPolicyStandbyChanges plays the rules in which the standby's level
// changes are inputs, and the blip window, as timelines. A standby is
// judged the same whether its level was there all along or arrived a
// moment ago: the degraded window still applies before a streak's first
// trigger, and a trigger that found the standby wanting is answered again
// the moment the standby becomes preferable. Every "no switch" case has a
// control beside it with one input changed that does switch.
func TestPolicyStandbyChanges(t *testing.T) {
	const (
		P = Primary
		B = Backup
	)
	slow := 10 * time.Second
	tests := []struct {
		name    string
		cfg     FailoverConfig
		opts    []PolicyOption
		primary simNode
		backup  simNode
		steps   []step
		until   float64
		want    expect
	}{
		// The late peer: a redundant pair's partner notices the drop, then
		// promotes itself.
		{name: "late peer: 0 while the peer reports 90, the peer rises 0.5 s later: switched at the rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(5.5), B, 250)}, until: 30,
			want: expect{switches: []sw{{5.505, B, CauseStandbyHealthy}}, probes: []float64{5, 5.5}}},
		{name: "control: the peer stays at 90: no switch within the window", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0)}, until: 14.9,
			want: expect{switches: []sw{}, probes: []float64{5}}},
		{name: "the peer rises before the drop: the 0 switches at once", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(4), B, 250), lvl(sec(5), P, 0)}, until: 30,
			want: expect{switches: []sw{{5.005, B, CauseMaintenance}}, probes: []float64{5}}},
		{name: "the peer rises with the drop, after it in the same instant: the 0's probe sees it", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(5), B, 250)}, until: 30,
			want: expect{switches: []sw{{5.005, B, CauseMaintenance}}, probes: []float64{5}}},
		{name: "the peer rises with the drop, before it in the same instant", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), B, 250), lvl(sec(5), P, 0)}, until: 30,
			want: expect{switches: []sw{{5.005, B, CauseMaintenance}}, probes: []float64{5}}},
		{name: "the peer rises only to Degraded: no switch", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(6), B, 199)}, until: 14.9,
			want: expect{switches: []sw{}, probes: []float64{5}}},
		{name: "control: the peer rises to 200: switched at the rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(6), B, 200)}, until: 14.9,
			want: expect{switches: []sw{{6.005, B, CauseStandbyHealthy}}, probes: []float64{5, 6}}},
		{name: "the active recovers before the peer rises: no switch", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 0), lvl(sec(5.2), P, 250), lvl(sec(5.5), B, 250)}, until: 30,
			want: expect{switches: []sw{}, probes: []float64{5}}},

		// A degraded level (not 0): the window still applies first.
		{name: "degraded: the peer rises inside the window: switched at the window, not at the rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(8), B, 250)}, until: 30,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}}, probes: []float64{15}}},
		{name: "degraded: the peer rises after the window found it wanting: switched at the rise", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(18), B, 250)}, until: 30,
			want: expect{switches: []sw{{18.005, B, CauseStandbyHealthy}}, probes: []float64{15, 18}}},
		{name: "connect-time: a Warm session whose peer comes up Healthy later: switched at the rise", primary: up(90), backup: up(50),
			steps: []step{lvl(sec(3), B, 250)}, until: 30,
			want: expect{switches: []sw{{3.005, B, CauseStandbyHealthy}}, probes: []float64{0.01, 3}}},

		// The anti-flap dwell holds a switch at the rise like any other.
		{name: "dwell: a peer rising inside the dwell is switched to when the dwell ends", primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 90), lvl(sec(20), B, 0), lvl(sec(30), P, 250)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {75.01, P, CauseMaintenance}}, probes: []float64{15, 75.005}}},
		{name: "control: without a dwell the 0 finds the peer wanting and the rise switches", cfg: slf(10, 0), primary: up(250), backup: up(250),
			steps: []step{lvl(sec(5), P, 90), lvl(sec(16), P, 90), lvl(sec(20), B, 0), lvl(sec(30), P, 250)}, until: 90,
			want: expect{switches: []sw{{15.005, B, CauseDegradedWindow}, {30.005, P, CauseStandbyHealthy}}, probes: []float64{15, 20, 30}}},

		// A lost link after a degraded level, the peer not preferable then.
		{name: "lost link after a degraded level: the peer rising during the retry wait is switched to", primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), kill(sec(8), P), lvl(sec(9), B, 250)}, until: 40,
			want: expect{switches: []sw{{9, B, CauseLostLinkDegraded}}, probes: []float64{8}}},
		{name: "disabled: the same rise changes nothing", cfg: disabled, primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), kill(sec(8), P), lvl(sec(9), B, 250)}, until: 40,
			want: expect{switches: []sw{{23.003, B, CauseRetriesExhausted}}, probes: []float64{}}},

		// Blips on a Warm pair (active 250, standby 90).
		{name: "Warm blip: a reset of the 250 primary's link is retried at once", opts: blip30, primary: up(250), backup: up(90),
			steps: []step{blip(sec(10), P)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{}, connects: []connectAt{{0, P, slow}, {10, P, slow}}}},
		{name: "control: without a blip window the same reset waits the reconnect delay", primary: up(250), backup: up(90),
			steps: []step{blip(sec(10), P)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{}, connects: []connectAt{{0, P, slow}, {15, P, slow}}}},
		{name: "Warm, dead primary: refusals are retried fast in the blip window, then the Warm standby", opts: blip30, primary: up(250), backup: up(90),
			steps: []step{kill(sec(10), P)}, until: 40,
			want: expect{switches: []sw{{10.203, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {10, P, slow}, {10.101, P, slow}, {10.202, P, slow}}}},
		{name: "Warm, frozen link: an attempt keeps the full dial timeout, later ones after the window are slow",
			opts: []PolicyOption{WithBlipWindow(2 * time.Second)}, primary: up(250), backup: up(90),
			steps: []step{freeze(sec(10), P)}, until: 60,
			want: expect{switches: []sw{{51, B, CauseRetriesExhausted}},
				connects: []connectAt{{0, P, slow}, {11, P, slow}, {26, P, slow}, {41, P, slow}}}},
		{name: "a lost link after a degraded level is no blip: the slow timing", opts: blip30, primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), blip(sec(8), P)}, until: 20,
			want: expect{switches: []sw{}, probes: []float64{8, 13.01}, connects: []connectAt{{0, P, slow}, {13, P, slow}}}},
		{name: "disabled: the blip window still applies, levels aside", cfg: disabled, opts: blip30, primary: up(250), backup: up(90),
			steps: []step{lvl(sec(5), P, 50), blip(sec(8), P)}, until: 40,
			want: expect{switches: []sw{}, probes: []float64{}, connects: []connectAt{{0, P, slow}, {8, P, slow}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, tt.cfg, tt.primary, tt.backup, tt.opts...)
			w.run(sec(tt.until), tt.steps...)
			checkExpect(t, w, tt.want)
		})
	}
}
