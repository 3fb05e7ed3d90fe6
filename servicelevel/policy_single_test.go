package servicelevel

import (
	"testing"
	"time"
)

// TestPolicySingleServer: a Policy for one server never probes or
// switches, whatever the server says or does; it retries the same server.
// Each case runs twice: with a peer (the positive control, which must
// probe or switch, proving the trigger was live) and without.
func TestPolicySingleServer(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	up := func(p *Policy, now time.Time) {
		p.Start(now)
		p.SessionUp(now)
		p.ActiveLevel(now, LevelOf(250))
		p.ActiveLevel(now.Add(20*time.Second), LevelOf(250)) // proven
	}
	for _, tc := range []struct {
		name   string
		events func(p *Policy) []Decision
		moved  Action // what a Policy with a peer does
	}{
		{"ServiceLevel 0", func(p *Policy) []Decision {
			up(p, t0)
			return []Decision{p.ActiveLevel(t0.Add(21*time.Second), LevelOf(0))}
		}, ActionProbe},
		{"degraded past the window", func(p *Policy) []Decision {
			up(p, t0)
			d1 := p.ActiveLevel(t0.Add(21*time.Second), LevelOf(150))
			return []Decision{d1, p.Tick(t0.Add(21*time.Second + time.Hour))}
		}, ActionProbe},
		{"link lost after a degraded level", func(p *Policy) []Decision {
			up(p, t0)
			p.ActiveLevel(t0.Add(21*time.Second), LevelOf(150))
			return []Decision{p.LinkLost(t0.Add(22 * time.Second))}
		}, ActionProbe},
		{"refused with a Healthy standby", func(p *Policy) []Decision {
			up(p, t0)
			p.StandbyLevel(t0, LevelOf(250))
			now := t0.Add(30 * time.Second)
			return []Decision{p.LinkLost(now), p.ConnectRefused(now)}
		}, ActionSwitch},
		{"connect attempts exhausted", func(p *Policy) []Decision {
			d := p.Start(t0)
			ds := []Decision{d}
			now := t0
			for range 10 {
				ds = append(ds, p.ConnectFailed(now))
				now = now.Add(time.Minute)
				ds = append(ds, p.Tick(now))
			}
			return ds
		}, ActionSwitch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := mustPolicy(t, FailoverConfig{})
			if !hasAction(tc.events(peer), tc.moved) {
				t.Fatalf("positive control: a Policy with a peer did not %s", tc.moved)
			}
			single := mustPolicy(t, FailoverConfig{})
			single.single = true
			ds := tc.events(single)
			for _, d := range ds {
				if d.Action == ActionProbe || d.Action == ActionSwitch || d.To != Primary && d.Action != ActionNone {
					t.Fatalf("a single-server Policy decided %s to %s (%v)", d.Action, d.To, d)
				}
			}
			if single.Active() != Primary {
				t.Fatalf("active is %s", single.Active())
			}
		})
	}
	// It does retry the one server.
	p := mustPolicy(t, FailoverConfig{})
	p.single = true
	p.Start(t0)
	now := t0
	connects := 0
	for range 10 {
		p.ConnectFailed(now)
		now = now.Add(time.Minute)
		if d := p.Tick(now); d.Action == ActionConnect && d.To == Primary {
			connects++
		}
	}
	if connects < 9 {
		t.Fatalf("%d reconnects to the one server in 10 failed attempts", connects)
	}
}

func hasAction(ds []Decision, a Action) bool {
	for _, d := range ds {
		if d.Action == a {
			return true
		}
	}
	return false
}

// TestPolicyAddPeer: a single-server Policy given a peer (a partner found
// by discovery) switches to it as a pair's Policy does, from the state it
// is in: a connected primary whose link is refused moves to the Healthy
// peer. Without AddPeer the same events only retry the primary (the
// control).
func TestPolicyAddPeer(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	run := func(addPeer bool) []Decision {
		p, err := NewSinglePolicy(FailoverConfig{})
		if err != nil {
			t.Fatal(err)
		}
		p.Start(t0)
		p.SessionUp(t0)
		p.ActiveLevel(t0, LevelOf(250))
		p.ActiveLevel(t0.Add(20*time.Second), LevelOf(250))
		if addPeer {
			p.AddPeer()
			p.AddPeer() // twice is once
		}
		p.StandbyLevel(t0.Add(21*time.Second), LevelOf(240))
		now := t0.Add(30 * time.Second)
		return []Decision{p.LinkLost(now), p.ConnectRefused(now)}
	}
	if hasAction(run(false), ActionSwitch) {
		t.Fatal("control: a single-server Policy switched")
	}
	ds := run(true)
	if !hasAction(ds, ActionSwitch) || ds[len(ds)-1].To != Backup {
		t.Fatalf("with the peer added: decisions %v, want a switch to the backup", ds)
	}
}

// TestPolicyStartOn: StartOn before Start makes the first connect go to
// the chosen endpoint (a successor starting where its predecessor
// served); after Start, on a single-server Policy or with no endpoint it
// changes nothing (the first connect, or the active, stays the primary's).
func TestPolicyStartOn(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	cases := []struct {
		name       string
		single     bool
		on         Endpoint
		afterStart bool
		want       Endpoint
	}{
		{"control: no StartOn", false, Primary, false, Primary},
		{"the backup", false, Backup, false, Backup},
		{"the primary", false, Primary, false, Primary},
		{"after Start", false, Backup, true, Primary},
		{"single server", true, Backup, false, Primary},
		{"not an endpoint", false, Endpoint(7), false, Primary},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			newPolicy := NewPolicy
			if c.single {
				newPolicy = NewSinglePolicy
			}
			p, err := newPolicy(FailoverConfig{})
			if err != nil {
				t.Fatal(err)
			}
			var d Decision
			if c.afterStart {
				d = p.Start(t0)
			}
			if c.name != "control: no StartOn" {
				p.StartOn(c.on)
			}
			if !c.afterStart {
				d = p.Start(t0)
			}
			if d.Action != ActionConnect || d.To != c.want || p.Active() != c.want || p.Status().Active != c.want {
				t.Fatalf("decision %v, active %v; want a connect to %v", d, p.Active(), c.want)
			}
		})
	}
}
