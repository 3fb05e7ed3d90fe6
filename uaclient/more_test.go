package uaclient_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/testcluster/uaserver"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// A standby whose ServiceLevel is not a Good Byte is never switched to by
// a ServiceLevel trigger: the probe answers Unknown, the Pair stays and
// says why. Positive control: the same standby serving a Byte is switched
// to at the next window.
func TestPairUnreadableStandbyLevelIsNeverATarget(t *testing.T) {
	for _, tc := range []struct {
		name string
		enc  uaserver.LevelEncoding
		why  string
	}{
		{"Int32", uaserver.LevelAsInt32, "value is int32, not a Byte"},
		{"no value", uaserver.LevelNoValue, "the server has no value"},
		{"Bad status", uaserver.LevelBadStatus, "status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOption{levels: [2]byte{250, 250}, cfg: oneSecondWindow, noStart: true})
			r.servers.B().SetLevelEncoding(tc.enc)
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			if err := r.pair.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := r.pair.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			r.waitBothUp()
			m := r.mark()
			r.servers.A().SetLevel(90)
			// Two windows: two probes, each answered Unknown, each a stay.
			for range 2 {
				stay := r.waitEvent(m, "stay", kind(uaclient.EventStay))
				if stay.Cause != servicelevel.CausePeerUnknown {
					t.Fatalf("stay: %+v", stay)
				}
				m = r.mark()
			}
			unreadable := r.eventsSince(mark{}, uaclient.EventLevelUnreadable)
			if len(unreadable) == 0 || unreadable[0].Endpoint != servicelevel.Backup || !strings.Contains(unreadable[0].Reason, tc.why) {
				t.Fatalf("unreadable events: %+v", unreadable)
			}
			if fo := r.eventsSince(mark{}, uaclient.EventFailover); len(fo) != 0 {
				t.Fatalf("switched to a standby whose level is unreadable: %s", fo[0].Message)
			}
			if st := r.pair.Status(); st.StandbyLevel.Known() || st.Active != servicelevel.Primary {
				t.Fatalf("status: %+v", st)
			}
			// Control: the standby's level readable again moves the data,
			// at the standby's next sample (the window's probes found it
			// wanting) or at the next window, whichever comes first.
			r.servers.B().SetLevelEncoding(uaserver.LevelAsByte)
			fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
			if fo.Cause != servicelevel.CauseStandbyHealthy && fo.Cause != servicelevel.CauseDegradedWindow || fo.PeerLevel != servicelevel.LevelOf(250) {
				t.Fatalf("control: %+v", fo)
			}
		})
	}
}

// An active whose level is unreadable never starts a streak, however low
// its real level: unknown is evidence of nothing. Positive control: the
// same level served as a Byte is left.
func TestPairUnreadableActiveLevelStays(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 250}, cfg: func(c *uaclient.PairConfig) {
		oneSecondWindow(c)
		c.PollIntervalMilliseconds = new(100)
	}})
	m := r.mark()
	r.servers.A().SetLevelEncoding(uaserver.LevelAsInt32)
	r.servers.A().SetLevel(90)
	r.waitEvent(m, "unreadable", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventLevelUnreadable && e.Endpoint == servicelevel.Primary
	})
	// 20 ticks of data (2 s, two windows) with polls every 100 ms.
	r.waitUpdates(m, 20, "data", func(u uaclient.Update) bool { return u.Kind == uaclient.UpdateData })
	if n := len(r.eventsSince(m, uaclient.EventStreakStarted)) + len(r.eventsSince(m, uaclient.EventFailover)); n != 0 {
		t.Fatalf("an unreadable level started a streak:\n%s", r.eventLog(m))
	}
	r.servers.A().SetLevelEncoding(uaserver.LevelAsByte)
	r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
}

// Unreachable endpoints: Start says so (with the last connect error) and
// the Pair keeps trying in the background; a backup that is the primary's
// URL is refused by NewPair.
func TestPairUnreachableEndpoints(t *testing.T) {
	eps := []string{deadPort(t), deadPort(t)}
	events := make(chan uaclient.Event, 1000)
	p, err := uaclient.NewPair(uaclient.PairConfig{Endpoints: eps,
		FailoverConfig: servicelevel.FailoverConfig{ReconnectDelaySeconds: new(1)}},
		uaclient.WithEventHandler(func(e uaclient.Event) {
			select {
			case events <- e:
			default:
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatalf("Start with both servers down: %v (it must not wait for them)", err)
	}
	err = p.WaitReady(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("WaitReady: %v", err)
	}
	failed := map[servicelevel.Endpoint]bool{}
	for !failed[servicelevel.Primary] || !failed[servicelevel.Backup] {
		select {
		case e := <-events:
			if e.Kind == uaclient.EventConnectFailed {
				failed[e.Endpoint] = true
			}
		case <-time.After(waitLong):
			t.Fatalf("connect failures seen: %v", failed)
		}
	}
	if st := p.Status(); st.Connected {
		t.Fatalf("status: %+v", st)
	}
	if err := p.Start(context.Background()); !errors.Is(err, uaclient.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	start := time.Now()
	p.Close()
	p.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := p.Start(context.Background()); !errors.Is(err, uaclient.ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := p.WaitReady(context.Background()); !errors.Is(err, uaclient.ErrClosed) {
		t.Fatalf("WaitReady after Close: %v", err)
	}
	if _, err := p.AddItems(context.Background(), nil); !errors.Is(err, uaclient.ErrClosed) {
		t.Fatalf("AddItems after Close: %v", err)
	}

	_, err = uaclient.NewPair(uaclient.PairConfig{Endpoints: []string{"opc.tcp://Plant-A:4840/", "opc.tcp://plant-a"}})
	if err == nil || !strings.Contains(err.Error(), "endpoints[1]: reaches the same server as endpoints[0]") {
		t.Fatalf("same URL: %v", err)
	}
}

// Items: a bad node ID, a duplicate handle and a node the server does not
// know are per-item errors, never a panic and never the other items'
// problem. Items added and removed while data flows.
func TestPairItemsWhileRunning(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	ctx := context.Background()
	m := r.mark()
	res, err := r.pair.AddItems(ctx, []uaclient.Item{
		{Handle: 50, NodeID: "i=2258"}, // CurrentTime: fine
		{Handle: 51, NodeID: "ns=1;s=NoSuchTag"},
		{Handle: 52, NodeID: "ns=x;i=1"},
		{Handle: 53, NodeID: ""},
		{Handle: 0, NodeID: "i=2258"}, // handle in use
		{Handle: 54, NodeID: "g=not-a-guid"},
		{Handle: 55, NodeID: "i=2267", QueueSize: 5, SamplingInterval: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		ok   bool
		code ua.StatusCode
		text string
	}{
		{true, ua.StatusOK, ""},
		{false, ua.StatusBadNodeIDUnknown, "item 51 (ns=1;s=NoSuchTag): rejected by primary"},
		{false, ua.StatusBadNodeIDInvalid, `item 52: node ID "ns=x;i=1"`},
		{false, ua.StatusBadNodeIDInvalid, "item 53: node ID is empty"},
		{false, ua.StatusBadInvalidArgument, "item 0 (i=2258): handle already in use"},
		{false, ua.StatusBadNodeIDInvalid, `item 54: node ID "g=not-a-guid"`},
		{true, ua.StatusOK, ""},
	}
	for i, w := range want {
		got := res[i]
		if (got.Err == nil) != w.ok || got.Status != w.code || w.text != "" && !strings.Contains(got.Err.Error(), w.text) {
			t.Errorf("item %d: %v %v, want ok=%v %v %q", got.Handle, got.Err, got.Status, w.ok, w.code, w.text)
		}
	}
	if st := r.pair.Status(); st.Items != testTags+2 {
		t.Fatalf("%d items, want %d: rejected items must not stay", st.Items, testTags+2)
	}
	// The new items' first values arrive as data changes, without a
	// snapshot.
	r.waitUpdates(m, 1, "CurrentTime", func(u uaclient.Update) bool { return u.Kind == uaclient.UpdateData && u.Handle == 50 })
	r.waitUpdates(m, 1, "ServiceLevel", func(u uaclient.Update) bool { return u.Kind == uaclient.UpdateData && u.Handle == 55 })
	if snaps := r.snapshots(r.updatesSince(m)); len(snaps) != 0 {
		t.Fatalf("AddItems on a running Pair made a snapshot")
	}

	err = r.pair.RemoveItems(ctx, []uint32{50, 999})
	if !errors.Is(err, uaclient.ErrUnknownHandle) || !strings.Contains(err.Error(), "item 999") {
		t.Fatalf("RemoveItems: %v", err)
	}
	after := r.mark()
	// Nothing of a removed item once RemoveItems has returned; the others
	// go on.
	r.waitUpdates(after, 5, "data", func(u uaclient.Update) bool { return u.Kind == uaclient.UpdateData && u.Handle == 0 })
	for _, u := range r.updatesSince(after) {
		if u.Handle == 50 && u.Kind == uaclient.UpdateData {
			t.Fatalf("update of a removed item: %+v", u)
		}
	}
	if n := r.servers.A().Stats().MonitoredItems; n != 2+testTags+1 {
		t.Fatalf("the server monitors %d items, want %d", n, 2+testTags+1)
	}
}

// Hot mode: the standby holds every item in Sampling; a promotion switches
// them to Reporting and is framed like a Warm one.
// TestPairStandbyItems: in Hot mode the standby keeps every item Sampling,
// in Prepared mode Disabled; neither reports, and a promotion turns them to
// Reporting.
func TestPairStandbyItems(t *testing.T) {
	for _, mode := range []uaclient.Mode{uaclient.ModeHot, uaclient.ModePrepared} {
		t.Run(string(mode), func(t *testing.T) { testStandbyItems(t, mode) })
	}
}

func testStandbyItems(t *testing.T, mode uaclient.Mode) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, cfg: func(c *uaclient.PairConfig) { c.Mode = mode }})
	b := r.servers.B()
	// The standby creates its items once its own session is up.
	deadline := time.Now().Add(waitLong)
	for b.Stats().MonitoredItems != 2+testTags {
		if time.Now().After(deadline) {
			t.Fatalf("the %s standby has %d monitored items, want %d", mode, b.Stats().MonitoredItems, 2+testTags)
		}
		time.Sleep(10 * time.Millisecond) // polling the server's state, with a deadline
	}
	wantDisabled := 0
	if mode == uaclient.ModePrepared {
		wantDisabled = testTags
	}
	if n := b.Stats().DisabledItems; n != wantDisabled {
		t.Fatalf("the %s standby has %d Disabled items, want %d", mode, n, wantDisabled)
	}
	// Items added later reach the standby too.
	if res, err := r.pair.AddItems(context.Background(), []uaclient.Item{{Handle: 60, NodeID: "i=2258"}}); err != nil || res[0].Err != nil {
		t.Fatalf("add: %v %+v", err, res)
	}
	for b.Stats().MonitoredItems != 3+testTags {
		if time.Now().After(deadline) {
			t.Fatalf("the %s standby has %d monitored items, want %d", mode, b.Stats().MonitoredItems, 3+testTags)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, u := range r.updatesSince(mark{}) {
		if u.Endpoint == servicelevel.Backup {
			t.Fatalf("a %s standby reported: %+v", mode, u)
		}
	}
	m := r.mark()
	r.servers.A().Kill()
	r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	r.waitEvent(m, "backup active", activeUp(servicelevel.Backup))
	r.waitUpdates(m, 5, "data from the backup", dataFrom(servicelevel.Backup))
	snaps := r.snapshots(r.updatesSince(m))
	if len(snaps) != 1 || snaps[0].start.Endpoint != servicelevel.Backup || len(snaps[0].values) != testTags+1 {
		t.Fatalf("snapshots: %+v", snaps)
	}
	r.checkCounters(r.updatesSince(mark{}))
}

// Close in the middle of a promotion returns promptly and leaves nothing
// behind (TestMain checks for goroutine leaks).
func TestPairCloseDuringFailover(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 90}})
	m := r.mark()
	r.servers.B().Promote()
	r.servers.A().GracefulStop(time.Second)
	r.waitEvent(m, "failover", kind(uaclient.EventFailover))
	start := time.Now()
	r.pair.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close during a failover took %v", d)
	}
	n := len(r.updatesSince(mark{}))
	if _, err := r.pair.AddItems(context.Background(), nil); !errors.Is(err, uaclient.ErrClosed) {
		t.Fatalf("AddItems after Close: %v", err)
	}
	if got := len(r.updatesSince(mark{})); got != n {
		t.Fatalf("%d updates delivered after Close returned", got-n)
	}
}

// uaserver.Tiers drives the test server's level through its health hook.
// A stale primary (200) is still Healthy and is not left; losing its
// config store as well (100) is, after the window.
func TestPairFollowsCalculatedLevels(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, cfg: func(c *uaclient.PairConfig) {
		oneSecondWindow(c)
		c.PollIntervalMilliseconds = new(100)
	}})
	a, b := r.servers.A(), r.servers.B()
	a.SetLevelFunc(uaserver.Tiers)
	b.SetLevelFunc(uaserver.Tiers)
	if a.Level() != uaserver.TierHealthyPrimary || b.Level() != uaserver.TierHealthyFollower {
		t.Fatalf("levels %d/%d", a.Level(), b.Level())
	}
	m := r.mark()
	if l := a.UpdateHealth(func(h *uaserver.Health) { h.Stale = true }); l != uaserver.TierStale {
		t.Fatalf("stale primary publishes %d", l)
	}
	r.waitStatus("primary at 200", func(st uaclient.PairStatus) bool { return st.ActiveLevel == servicelevel.LevelOf(200) })
	// Two windows' worth of data and polls at 200: no streak.
	r.waitUpdates(m, 20, "data", dataFrom(servicelevel.Primary))
	if n := len(r.eventsSince(m, uaclient.EventStreakStarted)) + len(r.eventsSince(m, uaclient.EventFailover)); n != 0 {
		t.Fatalf("a stale (200) primary was left:\n%s", r.eventLog(m))
	}
	// Control: the config store goes too.
	m = r.mark()
	if l := a.UpdateHealth(func(h *uaserver.Health) { h.StoreReachable = false }); l != uaserver.TierCriticallyDegraded {
		t.Fatalf("primary without its store publishes %d", l)
	}
	fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseDegradedWindow || fo.Level != servicelevel.LevelOf(100) || fo.PeerLevel != servicelevel.LevelOf(240) {
		t.Fatalf("failover: %+v", fo)
	}
}

// A handler that stops taking updates fills the backlog; the Pair then
// stops asking for more, and that silence is not a lost link. Positive
// control: a link that really freezes meanwhile is still caught (by the
// ServiceLevel poll), and the Pair fails over while the handler is held.
func TestPairSlowHandlerIsNotALostLink(t *testing.T) {
	g := &gate{}
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, gate: g, opts: []uaclient.PairOption{uaclient.WithBacklog(16)}})
	r.waitUpdates(mark{}, 5, "data", dataFrom(servicelevel.Primary))
	g.shut()
	defer g.release()
	// Three seconds of the simulated process (30 ticks): five heartbeat
	// timeouts with nothing delivered.
	held := r.servers.Tick()
	deadline := time.Now().Add(waitLong)
	for r.servers.Tick() < held+30 {
		if time.Now().After(deadline) {
			t.Fatal("the simulated process stopped")
		}
		time.Sleep(10 * time.Millisecond) // polling the process clock, with a deadline
	}
	if st := r.pair.Status(); !st.Connected || st.Failovers != 0 ||
		st.Sessions != [2]uaclient.SessionState{uaclient.SessionUp, uaclient.SessionUp} {
		t.Fatalf("a held handler lost a session: %+v", st)
	}
	// Control: the primary's link freezes while the handler is held.
	r.servers.A().Freeze()
	r.waitStatus("failed over", func(st uaclient.PairStatus) bool {
		return st.Failovers == 1 && st.Active == servicelevel.Backup
	})
	g.release()
	lost := r.waitEvent(mark{}, "primary lost", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary
	})
	if !strings.Contains(lost.Message, "deadline") {
		t.Errorf("the frozen link was lost by %q, want the poll's deadline", lost.Message)
	}
	r.waitUpdates(mark{}, 1, "data from the backup", dataFrom(servicelevel.Backup))
	r.servers.A().Heal()
}

// TestPairOutOfServiceHoldIsBounded: a primary that turns its data
// Bad_OutOfService while a Healthy standby waits is held back, but when no
// promotion follows (a degraded level waits out its window) the samples go
// on after the bound, in order: the hold hides a planned failover, never a
// real outage. The positive control is the promotion case in
// TestPairGracefulStop, where the same samples are dropped.
func TestPairOutOfServiceHoldIsBounded(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, cfg: func(c *uaclient.PairConfig) {
		window := 30 // far beyond the hold
		c.ServiceLevelFailover = &servicelevel.ServiceLevelFailover{DegradedWindowSeconds: &window}
	}})
	r.waitUpdates(mark{}, 3, "data from the primary", dataFrom(servicelevel.Primary))
	m := r.mark()
	demoted := time.Now()
	r.servers.A().Demote() // 90: its data turns Bad_OutOfService
	bad := r.waitUpdates(m, 1, "the Bad_OutOfService samples, once the hold ends", func(u uaclient.Update) bool {
		return u.Kind == uaclient.UpdateData && u.Value != nil && u.Value.Status == ua.StatusBadOutOfService
	})
	if d := bad[0].Received.Sub(demoted); d > 10*time.Second {
		t.Fatalf("the first Bad_OutOfService sample was received %v after the demotion", d)
	}
	// Received is when the sample arrived at the Pair; the hold kept it
	// from the handler for up to 2 s. The handler saw nothing from the
	// primary in between but what came before the first Bad sample.
	if evs := r.eventsSince(m, uaclient.EventFailover); len(evs) != 0 {
		t.Fatalf("failover within the degraded window: %v", evs[0])
	}
	ups := r.updatesSince(m)
	seenBad := false
	for _, u := range ups {
		if u.Kind != uaclient.UpdateData || u.Value == nil {
			continue
		}
		if u.Value.Status == ua.StatusBadOutOfService {
			seenBad = true
		} else if seenBad && u.Endpoint == servicelevel.Primary && u.Value.Status == ua.StatusOK {
			t.Fatalf("a Good sample from the demoted primary after its Bad ones")
		}
	}
}

// Each session ranks its health subscription above its data subscription,
// so that a server answers the ServiceLevel first when both wait for a
// Publish request (uaserver honours it, see its own test), and
// publishes it every heartbeat interval.
func TestPairHealthSubscriptionOutranksData(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 90}, cfg: func(c *uaclient.PairConfig) { c.HeartbeatIntervalMilliseconds = new(40) }})
	subs := r.servers.A().Subscriptions()
	if len(subs) != 2 {
		t.Fatalf("active server has %d subscriptions, want health and data: %+v", len(subs), subs)
	}
	health, data := subs[0], subs[1]
	if health.Items != 2 || data.Items != testTags {
		t.Fatalf("subscriptions: %+v, want the health one (2 items) first, then the data one (%d)", subs, testTags)
	}
	if health.Priority <= data.Priority || health.Interval != 40*time.Millisecond {
		t.Fatalf("health %+v, data %+v: want the health subscription ranked higher, every 40 ms", health, data)
	}
}
