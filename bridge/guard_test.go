package bridge

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func noJitter() GuardConfig {
	c := DefaultGuardConfig()
	c.Jitter = 0
	return c
}

// step is one event fed to a guard and what it must answer.
type step struct {
	at     float64
	ev     string // want, ok, fail, tick, restored; ok/fail reply to id
	id     uint64
	send   bool
	reason string
}

func runGuard(t *testing.T, g *subscribeGuard, steps []step) {
	t.Helper()
	for i, s := range steps {
		var d guardDecision
		now := at(s.at)
		switch s.ev {
		case "want":
			d = g.Want(now)
		case "ok":
			d = g.Reply(now, s.id, true)
		case "fail":
			d = g.Reply(now, s.id, false)
		case "tick":
			d = g.Tick(now)
		case "restored":
			d = g.Restored(now)
		default:
			t.Fatalf("step %d: unknown event %q", i, s.ev)
		}
		if d.Send != s.send || (s.send && s.reason != "" && d.Reason != s.reason) {
			t.Fatalf("step %d (%s at %vs): got %+v, want send=%v reason=%q", i, s.ev, s.at, d, s.send, s.reason)
		}
	}
}

func TestGuardRules(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"first request goes at once", []step{{0, "want", 0, true, "first"}}},
		{"at most one in flight", []step{
			{0, "want", 0, true, "first"}, {5, "want", 0, false, ""}, {10, "tick", 0, false, ""}, {44, "want", 0, false, ""},
		}},
		{"control: after the reply the next want goes", []step{
			{0, "want", 0, true, "first"}, {1, "ok", 1, false, ""}, {2, "want", 0, true, "retry"},
		}},
		{"failure waits the floor", []step{
			{0, "want", 0, true, ""}, {1, "fail", 1, false, ""}, {5.9, "tick", 0, false, ""}, {5.9, "want", 0, false, ""},
			{6, "tick", 0, true, "retry"},
		}},
		{"backoff doubles to the ceiling", []step{
			{0, "want", 0, true, ""}, {0, "fail", 1, false, ""}, // next in 5
			{5, "tick", 0, true, ""}, {5, "fail", 2, false, ""}, // next in 10
			{14.9, "tick", 0, false, ""}, {15, "tick", 0, true, ""}, {15, "fail", 3, false, ""}, // 20
			{34.9, "tick", 0, false, ""}, {35, "tick", 0, true, ""}, {35, "fail", 4, false, ""}, // 40
			{74.9, "tick", 0, false, ""}, {75, "tick", 0, true, ""}, {75, "fail", 5, false, ""}, // 60 (capped)
			{134.9, "tick", 0, false, ""}, {135, "tick", 0, true, ""}, {135, "fail", 6, false, ""}, // 60
			{194.9, "tick", 0, false, ""}, {195, "tick", 0, true, ""},
		}},
		{"success resets the backoff", []step{
			{0, "want", 0, true, ""}, {0, "fail", 1, false, ""}, {5, "tick", 0, true, ""}, {5, "fail", 2, false, ""},
			{15, "tick", 0, true, ""}, {15, "ok", 3, false, ""},
			{20, "want", 0, true, ""}, {20, "fail", 4, false, ""}, {24.9, "tick", 0, false, ""}, {25, "tick", 0, true, ""},
		}},
		{"lost reply after the in-flight ceiling", []step{
			{0, "want", 0, true, ""}, {44.9, "tick", 0, false, ""}, {45, "tick", 0, true, "lost-reply"},
			{46, "ok", 1, false, ""},     // reply to the superseded request: dropped
			{47, "want", 0, false, ""},   // request 2 still in flight
			{89.9, "tick", 0, false, ""}, // positive control below: 2 is lost at 90
			{90, "tick", 0, true, "lost-reply"},
		}},
		{"a superseded success does not end the request in flight", []step{
			{0, "want", 0, true, ""}, {45, "tick", 0, true, ""}, {46, "ok", 1, false, ""}, {60, "want", 0, false, ""},
			{61, "ok", 2, false, ""}, {62, "want", 0, true, ""},
		}},
		{"restore resets the backoff and supersedes", []step{
			{0, "want", 0, true, ""}, {0, "fail", 1, false, ""}, {5, "tick", 0, true, ""}, {5, "fail", 2, false, ""},
			{6, "restored", 0, true, "restored"},                                               // at once, despite the 10 s delay
			{7, "fail", 3, false, ""}, {11.9, "tick", 0, false, ""}, {12, "tick", 0, true, ""}, // floor again
		}},
		{"restore while in flight drops the old reply", []step{
			{0, "want", 0, true, ""}, {1, "restored", 0, true, ""}, {2, "fail", 1, false, ""}, {3, "want", 0, false, ""},
		}},
		{"a retry tick racing a success does not subscribe again", []step{
			{0, "want", 0, true, ""}, {0, "fail", 1, false, ""}, {5, "tick", 0, true, ""},
			{5.5, "ok", 2, false, ""}, {5.5, "tick", 0, false, ""}, {10, "tick", 0, false, ""}, {100, "tick", 0, false, ""},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runGuard(t, newSubscribeGuard(noJitter(), nil), tt.steps)
		})
	}
}

// TestGuardStorm replays the subscribe-storm incident: a source that never
// answers, with the old actor's 5 s retry timer still poking the guard, for
// 110 s.
// Before the fix that was 22 requests; the guard sends 3 and never has two
// in flight.
func TestGuardStorm(t *testing.T) {
	g := newSubscribeGuard(DefaultGuardConfig(), func() float64 { return 0.5 })
	inFlight := 0
	maxInFlight := 0
	for ms := 0; ms <= 110_000; ms += 100 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		var d guardDecision
		if ms%5000 == 0 {
			d = g.Want(now)
		} else {
			d = g.Tick(now)
		}
		if d.Send {
			// The previous request, if any, is presumed lost: the bridge
			// cancels it, so it is no longer in flight at the source.
			inFlight = 1
		}
		maxInFlight = max(maxInFlight, inFlight)
	}
	st := g.Stats()
	if st.Requests != 3 || st.LostReplies != 2 || maxInFlight != 1 {
		t.Fatalf("stats %+v, max in flight %d; want 3 requests (0, 45, 90 s)", st, maxInFlight)
	}
}

func TestGuardJitter(t *testing.T) {
	cfg := DefaultGuardConfig() // jitter 0.5
	for _, r := range []float64{0, 0.5, 0.999} {
		g := newSubscribeGuard(cfg, func() float64 { return r })
		g.Want(t0)
		g.Reply(t0, 1, false)
		next, _ := g.NextDeadline()
		d := next.Sub(t0)
		if d < 2500*time.Millisecond || d > 5*time.Second {
			t.Errorf("rand %v: first retry after %v, want within [2.5s, 5s]", r, d)
		}
	}
}

func TestGuardNextDeadline(t *testing.T) {
	g := newSubscribeGuard(noJitter(), nil)
	if _, ok := g.NextDeadline(); ok {
		t.Fatal("deadline before anything was wanted")
	}
	g.Want(t0)
	if d, _ := g.NextDeadline(); !d.Equal(at(45)) {
		t.Fatalf("in flight: deadline %v, want the ceiling", d)
	}
	g.Reply(at(1), 1, false)
	if d, _ := g.NextDeadline(); !d.Equal(at(6)) {
		t.Fatalf("after a failure: deadline %v", d)
	}
	g.Tick(at(6))
	g.Reply(at(7), 2, true)
	if _, ok := g.NextDeadline(); ok {
		t.Fatal("deadline after success")
	}
}

func TestGuardConfigValidate(t *testing.T) {
	if err := DefaultGuardConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*GuardConfig){
		func(c *GuardConfig) { c.RetryFloor = 0 },
		func(c *GuardConfig) { c.RetryCeiling = c.RetryFloor - 1 },
		func(c *GuardConfig) { c.InFlightCeiling = 0 },
		func(c *GuardConfig) { c.Jitter = 1.5 },
	}
	for i, f := range bad {
		c := DefaultGuardConfig()
		f(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
	// Every problem at once, each on its own.
	c := GuardConfig{RetryFloor: 2 * time.Hour, RetryCeiling: time.Hour, InFlightCeiling: time.Millisecond, Jitter: 2}
	err := c.Validate()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok || len(j.Unwrap()) != 4 {
		t.Errorf("four problems, reported as %v", err)
	}
}
