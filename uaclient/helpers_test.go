package uaclient_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
	"go.uber.org/goleak"
)

// The helpers of the real-server tests (package uaclient_test) are in
// this file, so that each exists once: the rig (a uaserver.Pair and a
// Pair on it, recording every update and event), waits with deadlines,
// and the checks of snapshots and counters.

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testTags = 8 // Counter, Ramp, Sine, Bool, Counter, ...
	waitLong = 15 * time.Second
)

// rig is one server pair and one Pair under test, with everything the
// Pair delivered recorded.
type rig struct {
	t       *testing.T
	servers *uaserver.Pair
	pair    *uaclient.Pair
	items   []uaclient.Item
	gate    *gate
	onData  func(uaclient.Update)

	mu      sync.Mutex
	events  []uaclient.Event
	updates []uaclient.Update
	// statuses are the Pair's status as each event's handler read it
	// (what a source reports as its health).
	statuses []uaclient.PairStatus
	changed  chan struct{}
}

type rigOption struct {
	levels [2]byte
	// endpoints, if set, gives the Pair's endpoints (default: the
	// servers' own).
	endpoints func(*testing.T, *uaserver.Pair) []string
	cfg       func(*uaclient.PairConfig)
	servers   []uaserver.Option
	opts      []uaclient.PairOption
	// optsFor, if set, adds options made for the servers.
	optsFor func(*uaserver.Pair) []uaclient.PairOption
	noStart bool
	// gate, if set, can hold the data handler.
	gate *gate
	// onData, if set, sees each update first, on the data handler.
	onData func(uaclient.Update)
}

// gate holds the data handler while shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{} // nil while open
}

func (g *gate) shut() {
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
	g.mu.Unlock()
}

func (g *gate) pass() {
	g.mu.Lock()
	c := g.open
	g.mu.Unlock()
	if c != nil {
		<-c
	}
}

// newRig starts the servers at the given levels and a Pair on them with
// the test tags as items (handle i for tag i), and starts the Pair.
func newRig(t *testing.T, o rigOption) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	sopts := append([]uaserver.Option{
		uaserver.WithTags(testTags),
		uaserver.WithServiceLevels(o.levels[0], o.levels[1]),
	}, o.servers...)
	servers, err := uaserver.StartPair(ctx, sopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(servers.Close)
	r := &rig{t: t, servers: servers, changed: make(chan struct{}, 1), gate: o.gate, onData: o.onData}
	cfg := uaclient.PairConfig{Endpoints: servers.Endpoints(), QueueSize: new(10)}
	if o.endpoints != nil {
		cfg.Endpoints = o.endpoints(t, servers)
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	opts := append([]uaclient.PairOption{
		uaclient.WithStrictPhases(),
		uaclient.WithLogger(testutil.Logger(t)),
		uaclient.WithDataHandler(r.onUpdate),
		uaclient.WithEventHandler(r.onEvent),
	}, o.opts...)
	if o.optsFor != nil {
		opts = append(opts, o.optsFor(servers)...)
	}
	p, err := uaclient.NewPair(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	r.pair = p
	t.Cleanup(p.Close) // runs before servers.Close
	for i, tag := range servers.Tags()[:testTags] {
		r.items = append(r.items, uaclient.Item{Handle: uint32(i), NodeID: tag.NodeID().String()})
	}
	res, err := p.AddItems(ctx, r.items)
	if err != nil {
		t.Fatal(err)
	}
	for _, ir := range res {
		if ir.Err != nil || ir.Status != ua.StatusBadWaitingForInitialData {
			t.Fatalf("item %d before Start: %v %v", ir.Handle, ir.Err, ir.Status)
		}
	}
	if !o.noStart {
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := p.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
		r.waitBothUp()
	}
	return r
}

// waitBothUp waits for the standby's session too: Start returns when data
// flows, whatever the standby does, and a fault injected before the
// standby is known would test another case.
func (r *rig) waitBothUp() {
	r.t.Helper()
	both := [2]uaclient.SessionState{uaclient.SessionUp, uaclient.SessionUp}
	r.waitStatus("both sessions up", func(st uaclient.PairStatus) bool { return st.Sessions == both && st.Connected })
}

func (r *rig) poke() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *rig) onUpdate(u uaclient.Update) {
	if r.gate != nil {
		r.gate.pass()
	}
	if r.onData != nil {
		r.onData(u)
	}
	r.mu.Lock()
	r.updates = append(r.updates, u)
	r.mu.Unlock()
	r.poke()
}

func (r *rig) onEvent(e uaclient.Event) {
	st := r.pair.Status()
	r.mu.Lock()
	r.events = append(r.events, e)
	r.statuses = append(r.statuses, st)
	r.mu.Unlock()
	r.poke()
}

// mark is a position in the recorded events and updates.
type mark struct{ ev, up int }

func (r *rig) mark() mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return mark{len(r.events), len(r.updates)}
}

// waitEvent waits for the first event after m that matches ok.
func (r *rig) waitEvent(m mark, what string, ok func(uaclient.Event) bool) uaclient.Event {
	r.t.Helper()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, e := range r.events[m.ev:] {
			if ok(e) {
				r.mu.Unlock()
				return e
			}
		}
		r.mu.Unlock()
		select {
		case <-r.changed:
		case <-deadline.C:
			r.t.Fatalf("no %s within %v; events:\n%s", what, waitLong, r.eventLog(m))
		}
	}
}

// waitUpdates waits until n updates after m match ok, and returns them.
func (r *rig) waitUpdates(m mark, n int, what string, ok func(uaclient.Update) bool) []uaclient.Update {
	r.t.Helper()
	deadline := time.NewTimer(waitLong)
	defer deadline.Stop()
	for {
		var got []uaclient.Update
		r.mu.Lock()
		for _, u := range r.updates[m.up:] {
			if ok(u) {
				got = append(got, u)
			}
		}
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-r.changed:
		case <-deadline.C:
			r.t.Fatalf("%d of %d %s within %v; events:\n%s", len(got), n, what, waitLong, r.eventLog(m))
		}
	}
}

// waitStatus polls the Pair's status until ok, with a deadline.
func (r *rig) waitStatus(what string, ok func(uaclient.PairStatus) bool) uaclient.PairStatus {
	r.t.Helper()
	deadline := time.Now().Add(waitLong)
	for {
		st := r.pair.Status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("status never %s: %+v", what, st)
		}
		time.Sleep(5 * time.Millisecond) // polling, with a deadline
	}
}

func (r *rig) eventsSince(m mark, kind uaclient.EventKind) []uaclient.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uaclient.Event
	for _, e := range r.events[m.ev:] {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func (r *rig) updatesSince(m mark) []uaclient.Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uaclient.Update(nil), r.updates[m.up:]...)
}

func (r *rig) eventLog(m mark) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.events[m.ev:] {
		fmt.Fprintf(&b, "  %s %-22s %s\n", e.At.Format("15:04:05.000"), e.Kind, e.Message)
	}
	return b.String()
}

func kind(k uaclient.EventKind) func(uaclient.Event) bool {
	return func(e uaclient.Event) bool { return e.Kind == k }
}

func failoverTo(to servicelevel.Endpoint) func(uaclient.Event) bool {
	return func(e uaclient.Event) bool { return e.Kind == uaclient.EventFailover && e.Target == to }
}

func activeUp(ep servicelevel.Endpoint) func(uaclient.Event) bool {
	return func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionUp && e.Role == uaclient.RoleActive && e.Endpoint == ep
	}
}

// dataFrom matches Good data changes from ep.
func dataFrom(ep servicelevel.Endpoint) func(uaclient.Update) bool {
	return func(u uaclient.Update) bool {
		return u.Kind == uaclient.UpdateData && u.Endpoint == ep && u.Value.Status == ua.StatusOK
	}
}

// snapshot is one refresh: start, values, end.
type snapshot struct {
	start, end uaclient.Update
	values     []uaclient.Update
}

// snapshots cuts the updates into refreshes and checks the framing: a
// start, one value per item in handle order, an end, all of one epoch and
// endpoint, epochs rising by one.
func (r *rig) snapshots(ups []uaclient.Update) []snapshot {
	r.t.Helper()
	var out []snapshot
	var cur *snapshot
	for _, u := range ups {
		switch u.Kind {
		case uaclient.UpdateRefreshStart:
			if cur != nil {
				r.t.Fatalf("refresh start %d inside refresh %d", u.Epoch, cur.start.Epoch)
			}
			cur = &snapshot{start: u}
		case uaclient.UpdateRefreshValue:
			if cur == nil || u.Epoch != cur.start.Epoch || u.Endpoint != cur.start.Endpoint {
				r.t.Fatalf("refresh value outside its refresh: %+v", u)
			}
			cur.values = append(cur.values, u)
		case uaclient.UpdateRefreshEnd:
			if cur == nil || u.Epoch != cur.start.Epoch {
				r.t.Fatalf("refresh end %d without its start", u.Epoch)
			}
			cur.end = u
			if len(cur.values) != cur.start.Items {
				r.t.Fatalf("refresh %d announced %d items, carried %d", u.Epoch, cur.start.Items, len(cur.values))
			}
			for i, v := range cur.values {
				if i > 0 && v.Handle <= cur.values[i-1].Handle {
					r.t.Fatalf("refresh %d: handles out of order", u.Epoch)
				}
			}
			if n := len(out); n > 0 && u.Epoch != out[n-1].start.Epoch+1 {
				r.t.Fatalf("epoch %d after %d", u.Epoch, out[n-1].start.Epoch)
			}
			out = append(out, *cur)
			cur = nil
		case uaclient.UpdateData:
			if cur != nil {
				r.t.Fatalf("data change inside refresh %d", cur.start.Epoch)
			}
		}
	}
	return out
}

// checkCounters checks the counter tags: ticks only move forward, data
// changes never repeat a tick with the same status, and it returns how
// many ticks were skipped.
func (r *rig) checkCounters(ups []uaclient.Update) (lost int) {
	r.t.Helper()
	type seen struct {
		v  int64
		st ua.StatusCode
	}
	last := map[uint32]seen{}
	for _, u := range ups {
		if u.Kind != uaclient.UpdateData && u.Kind != uaclient.UpdateRefreshValue || u.Handle >= testTags || u.Handle%4 != 0 || u.Value.Value == nil {
			continue
		}
		v, ok := u.Value.Value.Value().(int64)
		if !ok {
			r.t.Fatalf("counter %d: %T", u.Handle, u.Value.Value.Value())
		}
		l, had := last[u.Handle]
		switch {
		case !had:
		case v < l.v && u.Kind == uaclient.UpdateData:
			r.t.Errorf("counter %d went back from %d to %d (%s from %s)", u.Handle, l.v, v, u.Kind, u.Endpoint)
		case v == l.v && u.Value.Status == l.st && u.Kind == uaclient.UpdateData:
			r.t.Errorf("counter %d: tick %d delivered twice from %s", u.Handle, v, u.Endpoint)
		case v > l.v+1:
			lost += int(v - l.v - 1)
		}
		if !had || v >= l.v {
			last[u.Handle] = seen{v, u.Value.Status}
		}
	}
	return lost
}

func deadPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "opc.tcp://" + addr
}

// oneSecondWindow: the degraded window at its minimum, and no dwell, so
// that tests see the window-driven rules in seconds.
func oneSecondWindow(c *uaclient.PairConfig) {
	c.ServiceLevelFailover = &servicelevel.ServiceLevelFailover{DegradedWindowSeconds: new(1), MinDwellSeconds: new(0)}
}

// checkRodeOut checks that the primary rode out what happened since m
// (a blip, a healed freeze): data flows from it again for a while, long
// enough for a wrong switch to have shown (it would follow the first
// sample), with no failover, no snapshot and no lost counter tick.
func (r *rig) checkRodeOut(m mark, what string) {
	r.t.Helper()
	r.waitUpdates(r.mark(), 10, "data changes from the primary after the "+what, dataFrom(servicelevel.Primary))
	if fo := r.eventsSince(m, uaclient.EventFailover); len(fo) != 0 {
		r.t.Fatalf("the %s switched: %s", what, fo[0].Message)
	}
	if snaps := r.snapshots(r.updatesSince(m)); len(snaps) != 0 {
		r.t.Fatalf("snapshots after the %s: %+v", what, snaps)
	}
	if lost := r.checkCounters(r.updatesSince(mark{})); lost != 0 {
		r.t.Fatalf("%d counter ticks lost across the %s", lost, what)
	}
}
