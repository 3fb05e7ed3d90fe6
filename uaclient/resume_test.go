package uaclient_test

import (
	"sync/atomic"
	"testing"

	"github.com/apbridge/apbridge/servicelevel"
	"github.com/apbridge/apbridge/uaclient"
)

// A data message sent into a connection that breaks under it is asked for
// again on the session's new connection: the blip costs nothing, and the
// recovery counts what was republished. The message is dropped on arrival
// and the connection reset at that moment, as if it had been lost with the
// link; the server holds it, unacknowledged, for Republish.
func TestPairBlipRepublishesWhatTheLinkLost(t *testing.T) {
	var reset atomic.Pointer[func()]
	var dropped atomic.Uint32
	r := newRig(t, rigOption{
		levels: [2]byte{250, 240},
		opts: []uaclient.PairOption{
			uaclient.WithDroppedMessages(func(seq uint32) bool {
				f := reset.Load()
				if f == nil || !dropped.CompareAndSwap(0, seq) {
					return false
				}
				(*f)()
				return true
			}),
		},
	})
	m := r.mark()
	f := func() { r.servers.A().ResetConns() }
	reset.Store(&f)
	rec := r.waitEvent(m, "primary recovered", kind(uaclient.EventLinkRecovered))
	if rec.Republished == 0 {
		t.Fatalf("message %d dropped, nothing republished: %s", dropped.Load(), rec.Message)
	}
	if evs := r.eventsSince(m, uaclient.EventNotificationsLost); len(evs) != 0 {
		t.Fatalf("lost: %s", evs[0].Message)
	}
	r.waitUpdates(r.mark(), 10, "data changes after the blip", dataFrom(servicelevel.Primary))
	if lost := r.checkCounters(r.updatesSince(mark{})); lost != 0 {
		t.Fatalf("%d counter ticks lost", lost)
	}
	if st := r.pair.Status(); st.Republished != uint64(rec.Republished) {
		t.Fatalf("status counts %d republished, the event %d", st.Republished, rec.Republished)
	}
}

// A server that forgot the session (a blip longer than the session
// timeout) but still has its subscriptions gets them transferred to a new
// session: no snapshot, no lost tick. One that forgot them too costs a new
// session with new subscriptions and a snapshot (the control: the
// transfer, not the reconnect, saved the data).
func TestPairTransfersSubscriptionsToANewSession(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	m := r.mark()
	if n := r.servers.A().ForgetSessions(true); n == 0 {
		t.Fatal("no session to forget")
	}
	rec := r.waitEvent(m, "primary recovered", kind(uaclient.EventLinkRecovered))
	if !rec.Transferred {
		t.Fatalf("recovered without a transfer: %s", rec.Message)
	}
	r.waitUpdates(r.mark(), 10, "data changes after the transfer", dataFrom(servicelevel.Primary))
	if snaps := r.snapshots(r.updatesSince(m)); len(snaps) != 0 {
		t.Fatalf("snapshots after the transfer: %+v", snaps)
	}
	if lost := r.checkCounters(r.updatesSince(mark{})); lost != 0 {
		t.Fatalf("%d counter ticks lost", lost)
	}

	m = r.mark()
	r.servers.A().ForgetSessions(false)
	up := r.waitEvent(m, "primary back", activeUp(servicelevel.Primary))
	if up.Cause != servicelevel.CauseReconnect {
		t.Fatalf("primary back by %v", up.Cause)
	}
	if evs := r.eventsSince(m, uaclient.EventLinkRecovered); len(evs) != 0 {
		t.Fatalf("recovered although the server forgot everything: %s", evs[0].Message)
	}
	if snaps := r.snapshots(r.updatesSince(m)); len(snaps) != 1 {
		t.Fatalf("%d snapshots after a new session, want 1", len(snaps))
	}
}

// A frozen link is noticed by the heartbeat gap, not by a socket error;
// healed before the Policy gives up on the server, the same session goes
// on, without a snapshot or a lost tick. The old connection is closed on a
// frozen link: the close must not end the session on the server.
func TestPairFrozenLinkResumesTheSession(t *testing.T) {
	r := newRig(t, rigOption{levels: [2]byte{250, 240}})
	m := r.mark()
	r.servers.A().Freeze()
	r.waitEvent(m, "primary lost", func(e uaclient.Event) bool {
		return e.Kind == uaclient.EventSessionLost && e.Endpoint == servicelevel.Primary
	})
	r.servers.A().Heal()
	rec := r.waitEvent(m, "primary recovered", kind(uaclient.EventLinkRecovered))
	if rec.Transferred {
		t.Fatalf("recovered by a transfer: %s", rec.Message)
	}
	r.checkRodeOut(m, "healed freeze")
}
