package uaclient_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
	"github.com/gopcua/opcua/ua"
)

// This file plays every bench scenario through a Pair against
// uaserver's redundant OPC UA pair, with faults injected for real (a level
// published, a process killed, a link frozen or reset through the
// servers' proxies). Nothing here sleeps to wait for a condition: tests
// wait for the Pair's events and updates, with deadlines. Timing
// assertions are loose (the package runs with -race on a busy 2-core
// machine); the bench measures. The rig the tests share is in
// helpers_test.go.

// sl-graceful-stop: the Warm primary publishes 0 while the backup promotes,
// and stops a second later. The items move to the backup, framed as a
// snapshot, before the primary lets go of them.
func TestPairGracefulStop(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 90}})
	first := r.snapshots(r.updatesSince(mark{}))
	if len(first) != 1 || first[0].start.Endpoint != servicelevel.Primary || first[0].start.Cause != servicelevel.CauseStartup {
		t.Fatalf("startup snapshot: %+v", first)
	}
	if st := r.pair.Status(); !st.Connected || st.Active != servicelevel.Primary || st.ActiveLevel != servicelevel.LevelOf(250) ||
		st.StandbyLevel != servicelevel.LevelOf(90) || st.Sessions != [2]uaclient.SessionState{uaclient.SessionUp, uaclient.SessionUp} {
		t.Fatalf("status before: %+v", st)
	}
	// A Warm standby has its health items only.
	if n := r.servers.B().Stats().MonitoredItems; n != 2 {
		t.Fatalf("the Warm standby has %d monitored items, want 2 (ServiceLevel, CurrentTime)", n)
	}
	r.waitUpdates(mark{}, 3, "data changes from the primary", dataFrom(servicelevel.Primary))

	m := r.mark()
	start := time.Now()
	r.servers.B().Promote()
	stop := r.servers.A().GracefulStop(time.Second)
	fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseMaintenance || fo.Endpoint != servicelevel.Primary ||
		fo.Message != "failover from primary to backup (ServiceLevel 0; backup reports 250)" {
		t.Fatalf("failover event: %+v", fo)
	}
	up := r.waitEvent(m, "backup active", activeUp(servicelevel.Backup))
	goods := r.waitUpdates(m, 1, "a Good value from the backup", func(u uaclient.Update) bool {
		return u.Endpoint == servicelevel.Backup && u.Value != nil && u.Value.Status == ua.StatusOK
	})
	t.Logf("0 published -> first Good value from the backup: %v (promotion %v)", goods[0].Received.Sub(start), up.Duration)
	if d := goods[0].Received.Sub(start); d > 2*time.Second {
		t.Errorf("switch took %v", d)
	}

	// The old primary's items were released after the snapshot, not
	// before, and the primary, now the standby, is lost when it stops.
	if err := stop.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(m, "standby lost", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary && e.Role == uaclient.RoleStandby
	})
	after := r.mark()
	r.waitUpdates(after, 3, "data changes from the backup", dataFrom(servicelevel.Backup))
	ups := r.updatesSince(m)
	snaps := r.snapshots(ups)
	if len(snaps) != 1 {
		t.Fatalf("%d snapshots after the failover, want 1", len(snaps))
	}
	s := snaps[0]
	if s.start.Endpoint != servicelevel.Backup || s.start.Cause != servicelevel.CauseMaintenance || len(s.values) != testTags {
		t.Fatalf("failover snapshot: start %+v, %d values", s.start, len(s.values))
	}
	for _, v := range s.values {
		if v.Value.Status != ua.StatusOK {
			t.Errorf("snapshot value %d from the promoted backup: %v", v.Handle, v.Value.Status)
		}
	}
	// Data before the snapshot came from the primary; after it, only from
	// the backup. The departing primary's Bad_OutOfService samples were
	// held and replaced by the snapshot: no Bad in between.
	inSnap := false
	for _, u := range ups {
		if u.Kind == uaclient.UpdateData && u.Value != nil && u.Value.Status == ua.StatusBadOutOfService {
			t.Errorf("a Bad_OutOfService sample from %s reached the handler across a planned failover", u.Endpoint)
		}
		switch {
		case u.Kind == uaclient.UpdateRefreshStart:
			inSnap = true
		case u.Kind == uaclient.UpdateData && !inSnap && u.Endpoint != servicelevel.Primary,
			u.Kind == uaclient.UpdateData && inSnap && u.Endpoint != servicelevel.Backup:
			t.Fatalf("data change from %s on the wrong side of the snapshot", u.Endpoint)
		}
	}
	if lost := r.checkCounters(r.updatesSince(mark{})); lost > 2*testTags/4 {
		t.Errorf("%d counter ticks lost across a graceful failover", lost)
	}
	if st := r.pair.Status(); !st.Connected || st.Active != servicelevel.Backup || st.Failovers != 1 || st.ActiveLevel != servicelevel.LevelOf(250) {
		t.Fatalf("status after: %+v", st)
	}
}

// sl-hard-kill: the primary's process dies with no 0 first. The reconnect
// goes at once because the standby is Healthy, its port refuses it, and a
// refusal is no blip: the standby is promoted without more retries.
func TestPairHardKill(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	m := r.mark()
	start := time.Now()
	r.servers.A().Kill()
	fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseRefused || fo.PeerLevel != servicelevel.LevelOf(240) {
		t.Fatalf("failover: %+v\n%s", fo, r.eventLog(m))
	}
	for _, e := range r.eventsSince(m, uaclient.EventRetryScheduled) {
		if !e.Fast {
			t.Errorf("slow retry with a Healthy standby: %s", e.Message)
		}
	}
	g := r.waitUpdates(m, 1, "a Good value from the backup", func(u uaclient.Update) bool {
		return u.Endpoint == servicelevel.Backup && u.Value != nil && u.Value.Status == ua.StatusOK
	})
	d := g[0].Received.Sub(start)
	t.Logf("kill -> first Good value from the backup: %v", d)
	if d > 3*time.Second {
		t.Errorf("switch took %v", d)
	}
	r.snapshots(r.updatesSince(mark{}))
	r.checkCounters(r.updatesSince(mark{}))
}

// sl-freeze: the primary's link freezes. gopcua alone never notices; the
// heartbeat gap does.
func TestPairFreeze(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	m := r.mark()
	start := time.Now()
	r.servers.A().Freeze()
	lost := r.waitEvent(m, "primary lost", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary
	})
	if !strings.Contains(lost.Message, "heartbeat gap") && !strings.Contains(lost.Message, "deadline") {
		t.Errorf("a frozen link was lost by: %s", lost.Message)
	}
	fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseRetriesExhausted {
		t.Fatalf("failover: %+v", fo)
	}
	g := r.waitUpdates(m, 1, "a Good value from the backup", func(u uaclient.Update) bool {
		return u.Endpoint == servicelevel.Backup && u.Value != nil && u.Value.Status == ua.StatusOK
	})
	t.Logf("freeze -> lost after %v -> first Good value from the backup after %v", lost.At.Sub(start), g[0].Received.Sub(start))
	if d := g[0].Received.Sub(start); d > 8*time.Second {
		t.Errorf("switch took %v", d)
	}
	r.servers.A().Heal()
}

// sl-blip: one connection reset on a 250 primary keeps the session: it
// is activated on a new connection, the data goes on without a snapshot
// and without a lost tick, and nothing switches. With a Healthy standby
// (240) and on a Warm pair (standby 90) alike: the first reconnect of a
// server that was Healthy goes at once, whatever the standby reports.
// Positive control: the same Pair, the primary then killed, does switch.
func TestPairBlipDoesNotSwitch(t *testing.T) {
	for _, standby := range []byte{240, 90} {
		t.Run(fmt.Sprintf("standby %d", standby), func(t *testing.T) {
			r := newRig(t, rigOption{levels: [2]byte{250, standby}})
			m := r.mark()
			if n := r.servers.A().ResetConns(); n == 0 {
				t.Fatal("no connection to reset")
			}
			r.waitEvent(m, "primary lost", func(e uaclient.Event) bool {
				return e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary
			})
			rec := r.waitEvent(m, "primary recovered", kind(uaclient.EventLinkRecovered))
			if rec.Endpoint != servicelevel.Primary || rec.Transferred {
				t.Fatalf("recovered: %+v", rec)
			}
			for _, e := range r.eventsSince(m, uaclient.EventRetryScheduled) {
				if !e.Fast {
					t.Errorf("slow retry of a blip: %s\n%s", e.Message, r.eventLog(m))
				}
			}
			r.checkRodeOut(m, "blip")
			if st := r.pair.Status(); st.Recoveries != 1 || st.Link.Recoverable < 30*time.Second {
				t.Fatalf("status after the blip: %d recoveries, link %+v", st.Recoveries, st.Link)
			}

			// Control: the process dies instead.
			m = r.mark()
			r.servers.A().Kill()
			r.waitEvent(m, "failover after a kill", failoverTo(servicelevel.Backup))
		})
	}
}

// sl-connect-standby: the primary is a Warm standby (90) when the Pair
// connects, the backup 250: the first sample moves the data at once.
func TestPairConnectStandby(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{90, 250}})
	fo := r.waitEvent(mark{}, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseConnectPreference || fo.Level != servicelevel.LevelOf(90) || fo.PeerLevel != servicelevel.LevelOf(250) {
		t.Fatalf("failover: %+v", fo)
	}
	sample := r.waitEvent(mark{}, "first sample", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventLevelChanged && e.Role == uaclient.RoleActive && e.Endpoint == servicelevel.Primary
	})
	up := r.waitEvent(mark{}, "backup active", activeUp(servicelevel.Backup))
	t.Logf("first sample -> backup carries the data: %v", up.At.Sub(sample.At))
	if d := up.At.Sub(sample.At); d > time.Second {
		t.Errorf("connect-time switch took %v", d)
	}
	snaps := r.snapshots(r.updatesSince(mark{}))
	if len(snaps) != 2 || snaps[0].start.Endpoint != servicelevel.Primary || snaps[1].start.Endpoint != servicelevel.Backup {
		t.Fatalf("snapshots: %+v", snaps)
	}
	for _, v := range snaps[0].values {
		if v.Value.Status != ua.StatusBadOutOfService {
			t.Errorf("the standby primary served %v", v.Value.Status)
		}
	}
	for _, v := range snaps[1].values {
		if v.Value.Status != ua.StatusOK {
			t.Errorf("the backup served %v", v.Value.Status)
		}
	}
}

// sl-healthy-pair: 250/240 never switches; its levels never start a
// streak. Positive control: the primary drops to 90 and the Pair leaves it
// after the degraded window.
func TestPairHealthyPairDoesNotSwitch(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}, cfg: func(c *uaclient.PairConfig) {
		c.ServiceLevelFailover = &servicelevel.ServiceLevelFailover{DegradedWindowSeconds: new(1)}
		c.PollIntervalMilliseconds = new(100)
	}})
	// 30 ticks of data, and the polls that ran meanwhile, on both levels.
	r.waitUpdates(mark{}, 30, "data changes", dataFrom(servicelevel.Primary))
	if n := len(r.eventsSince(mark{}, uaclient.EventFailover)) + len(r.eventsSince(mark{}, uaclient.EventStreakStarted)) +
		len(r.eventsSince(mark{}, uaclient.EventProbe)); n != 0 {
		t.Fatalf("a healthy pair probed or switched:\n%s", r.eventLog(mark{}))
	}
	m := r.mark()
	r.servers.A().SetLevel(90)
	r.waitEvent(m, "streak", kind(uaclient.EventStreakStarted))
	fo := r.waitEvent(m, "failover", failoverTo(servicelevel.Backup))
	if fo.Cause != servicelevel.CauseDegradedWindow || fo.PeerLevel != servicelevel.LevelOf(240) {
		t.Fatalf("control failover: %+v", fo)
	}
}

// Write goes to the active endpoint only while its level is Healthy.
func TestPairWriteGate(t *testing.T) {
	// Both Degraded after the demotion below, so that nothing switches.
	r := newRig(t, rigOption{levels: [2]byte{250, 90}})
	sp := r.servers.Setpoints()[0]
	res, err := r.pair.AddItems(context.Background(), []uaclient.Item{{Handle: 100, NodeID: sp.NodeID().String()}})
	if err != nil || res[0].Err != nil || res[0].Status != ua.StatusOK {
		t.Fatalf("add the setpoint: %v %+v", err, res)
	}
	ctx := context.Background()
	code, err := r.pair.Write(ctx, 100, 12.5)
	if err != nil || code != ua.StatusOK {
		t.Fatalf("write on a Healthy primary: %v %v", code, err)
	}
	ws, err := r.servers.WaitWrites(ctx, 1)
	if err != nil || ws[0].Server != "A" || ws[0].Value != 12.5 {
		t.Fatalf("writes: %+v %v", ws, err)
	}
	if code, err := r.pair.WriteNode(ctx, sp.NodeID().String(), 13.5); err != nil || code != ua.StatusOK {
		t.Fatalf("write by node: %v %v", code, err)
	}
	// A server's own refusal is returned as its status.
	if code, err := r.pair.Write(ctx, 100, "not a double"); code != ua.StatusBadTypeMismatch || err == nil {
		t.Fatalf("write of a string: %v %v", code, err)
	}

	// The primary turns standby (the backup is one too): refused, and
	// nothing reaches a server.
	m := r.mark()
	r.servers.A().SetLevel(90)
	r.waitEvent(m, "primary at 90", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventLevelChanged && e.Endpoint == servicelevel.Primary && e.Level == servicelevel.LevelOf(90)
	})
	code, err = r.pair.Write(ctx, 100, 99.0)
	var refused *uaclient.WriteRefusedError
	if !errors.As(err, &refused) || !errors.Is(err, uaclient.ErrWriteRefused) || !errors.Is(err, uaclient.ErrNotHealthy) ||
		refused.Level != servicelevel.LevelOf(90) || code == ua.StatusOK {
		t.Fatalf("write on a standby primary: %v %v", code, err)
	}
	t.Logf("refused: %v", err)
	if n := len(r.servers.Writes()); n != 2 {
		t.Fatalf("%d writes reached the servers, want 2", n)
	}
	// Control: Healthy again, written again.
	m = r.mark()
	r.servers.A().SetLevel(250)
	r.waitEvent(m, "primary at 250", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventLevelChanged && e.Endpoint == servicelevel.Primary && e.Level == servicelevel.LevelOf(250)
	})
	if code, err := r.pair.Write(ctx, 100, 14.5); err != nil || code != ua.StatusOK {
		t.Fatalf("write after recovery: %v %v", code, err)
	}
	if _, err := r.pair.Write(ctx, 999, 1.0); !errors.Is(err, uaclient.ErrUnknownHandle) {
		t.Fatalf("unknown handle: %v", err)
	}
	if _, err := r.pair.WriteNode(ctx, "ns=x;i=1", 1.0); err == nil || errors.Is(err, uaclient.ErrWriteRefused) {
		t.Fatalf("bad node ID: %v", err)
	}
	if _, err := r.pair.Write(ctx, 100, struct{}{}); err == nil {
		t.Fatal("a value gopcua cannot encode was written")
	}

	// No session: refused as such.
	r.servers.A().Kill()
	r.servers.B().Kill()
	r.waitStatus("disconnected", func(st uaclient.PairStatus) bool { return !st.Connected })
	if _, err := r.pair.Write(ctx, 100, 1.0); !errors.Is(err, uaclient.ErrNoSession) {
		t.Fatalf("write without a session: %v", err)
	}
	r.pair.Close()
	if _, err := r.pair.Write(ctx, 100, 1.0); !errors.Is(err, uaclient.ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// An event's handler reads the status as of the event, never from before
// it: a source derives its health from the status when an event arrives,
// and a level change that was the last event of a while would otherwise
// leave that health stale (a Healthy server reported Degraded). The
// active's level goes Degraded and back 30 times, each time once its
// change has been reported. (Without the fix about one run in four
// catches the race.)
func TestPairStatusCurrentInEventHandler(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	m := r.mark()
	for i := range 30 {
		lvl := byte(150)
		if i%2 == 1 {
			lvl = 250
		}
		r.servers.A().SetLevel(lvl)
		r.waitEvent(m, fmt.Sprintf("change %d to %d", i, lvl), func(e uaclient.Event) bool {
			return e.Kind == uaclient.EventLevelChanged && e.Role == uaclient.RoleActive && e.Level == servicelevel.LevelOf(lvl)
		})
		m = r.mark()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changes := 0
	for i, e := range r.events {
		if e.Kind != uaclient.EventLevelChanged || e.Role != uaclient.RoleActive {
			continue
		}
		changes++
		if got := r.statuses[i].ActiveLevel; got != e.Level {
			t.Errorf("event %d (%s): the handler read ActiveLevel %v, want %v", i, e.Message, got, e.Level)
		}
	}
	if changes < 30 {
		t.Fatalf("%d active level changes reported, want at least 30", changes)
	}
}
