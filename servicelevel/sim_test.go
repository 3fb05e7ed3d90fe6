package servicelevel

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// This file is a simulated supervisor and server pair on a virtual clock.
// It executes the Policy's decisions the way the real supervisor does
// (promote the warm standby, dial, answer probes from the standby's live
// session) against two scripted servers, so policy tests read as
// timelines: "at 5 s the primary reports 90", "at 8 s it dies".

var t0 = time.Date(2026, 11, 13, 13, 52, 0, 0, time.UTC)

// Latencies of the simulated supervisor, in virtual time.
const (
	simConnectLatency = 10 * time.Millisecond // dial + session to a live server
	simPromoteLatency = 1 * time.Millisecond  // promote a live warm standby
	simRefuseLatency  = 1 * time.Millisecond  // dial to a dead port
	simProbeLatency   = 5 * time.Millisecond  // read from the standby's live session
	simFreezeDetect   = 1 * time.Second       // heartbeat gap that reveals a frozen link
	simPoll           = 2 * time.Second       // periodic ServiceLevel read
)

type nodeState uint8

const (
	nodeUp     nodeState = iota
	nodeDead             // process gone, port closed: refused at once
	nodeFrozen           // link frozen: no error, no answer
	nodeFlaky            // accepts sessions and drops them before any data
)

type simNode struct {
	level Level
	state nodeState
}

// record is one decision the supervisor executed.
type record struct {
	at time.Duration
	d  Decision
}

func (r record) String() string {
	return fmt.Sprintf("%v %s", r.at, r.d)
}

type timed struct {
	at  time.Time
	seq int
	fn  func()
}

type world struct {
	t     *testing.T
	p     *Policy
	now   time.Time
	nodes [2]simNode

	activeSession  bool // the supervisor holds a live session on p.Active()
	standbySession bool // ... and on the other endpoint
	demote         bool // a switch in flight keeps the session it leaves as the standby
	gen            int  // fences completions scheduled for an older session

	queue    []timed
	seq      int
	nextPoll time.Time

	trace []record
	obs   []Observation
}

type step struct {
	at time.Duration
	do func(w *world)
}

// newWorld starts a pair whose primary reports primary and whose backup
// reports backup; the supervisor then starts the policy.
func newWorld(t *testing.T, cfg FailoverConfig, primary, backup simNode, opts ...PolicyOption) *world {
	t.Helper()
	p, err := NewPolicy(cfg, opts...)
	if err != nil {
		t.Fatalf("NewPolicy: %v", err)
	}
	w := &world{t: t, p: p, now: t0}
	w.nodes[Primary] = primary
	w.nodes[Backup] = backup
	w.nextPoll = t0.Add(simPoll)
	if backup.state == nodeUp {
		w.standbySession = true
		w.feed(p.StandbyLevel(w.now, backup.level))
	}
	w.feed(p.Start(w.now))
	return w
}

func (w *world) at(d time.Duration, fn func()) {
	w.seq++
	w.queue = append(w.queue, timed{at: t0.Add(d), seq: w.seq, fn: fn})
}

func (w *world) after(d time.Duration, fn func()) {
	w.at(w.now.Add(d).Sub(t0), fn)
}

// run plays the script until the virtual time until.
func (w *world) run(until time.Duration, steps ...step) {
	w.t.Helper()
	for _, s := range steps {
		s := s
		w.at(s.at, func() { s.do(w) })
	}
	end := t0.Add(until)
	for i := 0; ; i++ {
		if i > 100000 {
			w.t.Fatalf("simulation does not settle at %v", w.now.Sub(t0))
		}
		sort.SliceStable(w.queue, func(a, b int) bool {
			if !w.queue[a].at.Equal(w.queue[b].at) {
				return w.queue[a].at.Before(w.queue[b].at)
			}
			return w.queue[a].seq < w.queue[b].seq
		})
		next, kind := end, "end"
		if len(w.queue) > 0 && !w.queue[0].at.After(next) {
			next, kind = w.queue[0].at, "queue"
		}
		if w.nextPoll.Before(next) {
			next, kind = w.nextPoll, "poll"
		}
		if dl, ok := w.p.NextDeadline(); ok {
			if dl.Before(w.now) {
				dl = w.now
			}
			if dl.Before(next) {
				next, kind = dl, "tick"
			}
		}
		w.now = next
		switch kind {
		case "end":
			return
		case "queue":
			q := w.queue[0]
			w.queue = w.queue[1:]
			q.fn()
		case "poll":
			w.nextPoll = w.nextPoll.Add(simPoll)
			if w.activeSession {
				w.feed(w.p.ActiveLevel(w.now, w.nodes[w.p.Active()].level))
			}
		case "tick":
			before := len(w.trace)
			w.feed(w.p.Tick(w.now))
			if dl, ok := w.p.NextDeadline(); ok && !dl.After(w.now) && len(w.trace) == before {
				w.t.Fatalf("deadline %v passed but Tick did nothing", dl.Sub(t0))
			}
		}
	}
}

// feed records a decision and executes it like the supervisor would.
func (w *world) feed(d Decision) {
	w.obs = append(w.obs, d.Observations...)
	if d.Action == ActionNone {
		return
	}
	w.trace = append(w.trace, record{at: w.now.Sub(t0), d: d})
	switch d.Action {
	case ActionProbe:
		peer := d.To
		answer := func() {
			l := Unknown()
			if w.standbySession && w.nodes[peer].state == nodeUp {
				l = w.nodes[peer].level
			}
			w.feed(w.p.ProbeResult(w.now, d.Probe, l))
		}
		w.after(simProbeLatency, answer)
	case ActionSwitch:
		w.gen++
		// The warm standby is promoted; the session left, if it is still
		// alive, is demoted to be the new standby's warm session.
		promoted := w.standbySession && w.nodes[d.To].state == nodeUp
		w.demote = w.activeSession && w.nodes[d.From].state == nodeUp
		w.activeSession = false
		w.standbySession = false
		if promoted {
			w.connectResult(simPromoteLatency, d.DialTimeout)
		} else {
			w.connectResult(simConnectLatency, d.DialTimeout)
		}
	case ActionConnect:
		w.connectResult(simConnectLatency, d.DialTimeout)
	}
}

// connectResult completes a connect to the active endpoint.
func (w *world) connectResult(latency, dialTimeout time.Duration) {
	target := w.p.Active()
	gen := w.gen
	switch w.nodes[target].state {
	case nodeUp:
		w.after(latency, func() {
			if gen != w.gen {
				return
			}
			w.activeSession = true
			w.feed(w.p.SessionUp(w.now))
			if w.demote {
				w.demote = false
				other := target.Other()
				if w.nodes[other].state == nodeUp {
					w.standbySession = true
					w.feed(w.p.StandbyLevel(w.now, w.nodes[other].level))
				}
			}
			// A subscription delivers the current value at once.
			w.feed(w.p.ActiveLevel(w.now, w.nodes[target].level))
		})
	case nodeDead:
		w.after(simRefuseLatency, func() {
			if gen == w.gen {
				w.feed(w.p.ConnectRefused(w.now))
			}
		})
	case nodeFrozen:
		w.after(dialTimeout, func() { w.feed(w.p.ConnectFailed(w.now)) })
	case nodeFlaky:
		w.after(latency, func() { w.feed(w.p.SessionUp(w.now)) })
		w.after(latency+time.Millisecond, func() { w.feed(w.p.LinkLost(w.now)) })
	}
}

// Script steps.

// setLevel changes what e reports; a live session sees it at once (a
// subscription, not only the poll).
func setLevel(at time.Duration, e Endpoint, l Level) step {
	return step{at, func(w *world) {
		w.nodes[e].level = l
		if w.p.Active() == e {
			if w.activeSession {
				w.feed(w.p.ActiveLevel(w.now, l))
			}
		} else if w.standbySession {
			w.feed(w.p.StandbyLevel(w.now, l))
		}
	}}
}

func lvl(at time.Duration, e Endpoint, v uint8) step { return setLevel(at, e, LevelOf(v)) }

// kill stops e's process: its sessions die with a socket error at once.
func kill(at time.Duration, e Endpoint) step {
	return step{at, func(w *world) {
		w.nodes[e].state = nodeDead
		w.dropSession(e)
	}}
}

// freeze stops e's link without an error: the supervisor notices the gap.
func freeze(at time.Duration, e Endpoint) step {
	return step{at, func(w *world) {
		w.nodes[e].state = nodeFrozen
		w.after(simFreezeDetect, func() { w.dropSession(e) })
	}}
}

// blip resets the active's connection once; the server stays up.
func blip(at time.Duration, e Endpoint) step {
	return step{at, func(w *world) { w.dropSession(e) }}
}

// revive restarts e at level v; a standby session is rebuilt.
func revive(at time.Duration, e Endpoint, v uint8) step {
	return step{at, func(w *world) {
		w.nodes[e] = simNode{level: LevelOf(v)}
		if w.p.Active() != e && !w.standbySession {
			w.standbySession = true
			w.feed(w.p.StandbyLevel(w.now, LevelOf(v)))
		}
	}}
}

func (w *world) dropSession(e Endpoint) {
	if w.p.Active() == e {
		if w.activeSession {
			w.activeSession = false
			w.gen++
			w.feed(w.p.LinkLost(w.now))
		}
		return
	}
	if w.standbySession {
		w.standbySession = false
		w.feed(w.p.StandbyLevel(w.now, Unknown()))
	}
}

// Trace queries.

func (w *world) actions(a Action) []record {
	var out []record
	for _, r := range w.trace {
		if r.d.Action == a {
			out = append(out, r)
		}
	}
	return out
}

func (w *world) connectsTo(e Endpoint, after time.Duration) []record {
	var out []record
	for _, r := range w.actions(ActionConnect) {
		if r.d.To == e && r.at >= after {
			out = append(out, r)
		}
	}
	return out
}

func (w *world) dump() string {
	var b strings.Builder
	for _, r := range w.trace {
		fmt.Fprintf(&b, "\n  %s", r)
	}
	return b.String()
}
