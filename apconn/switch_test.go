package apconn_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/ldm"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

func TestActiveLDMSwitchesToPassiveAndArmsThird(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLameDuckHandling(ldm.SwitchToPassive))
	if st := c.Status(); st != apconn.StatusConnected {
		t.Fatalf("status %v, want connected", st)
	}
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	if a == p {
		t.Fatal("active and passive on the same node")
	}
	tr := traffic(t, c, "ldm.switch")

	start := time.Now()
	done := a.EnterLameDuck()
	sw := ev.wait(t, apconn.EventSwitched, testGrace)
	if sw.Cause != apconn.CauseLameDuck || sw.From.ID == "" || sw.To.ID == "" || sw.Duration <= 0 {
		t.Fatalf("switch event %+v", sw)
	}
	if took := sw.At.Sub(start); took > testGrace/3 {
		t.Fatalf("switch took %v, not well inside the %v grace period", took, testGrace)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active moved to %s, want the old passive %s", got.Name(), p.Name())
	}
	armed := ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
	if third := cl.NodeByServerID(armed.To.ID); third == nil || third == a || third == p {
		t.Fatalf("fresh passive on %v, want the third broker", armed.To.Name)
	}
	runPast(t, tr, done)
	rep := settle(t, tr)
	if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.PublishErrors != 0 {
		t.Fatalf("traffic across the switch and the eviction: %+v", rep)
	}
	if n := ev.count(apconn.EventSwitched); n != 1 {
		t.Fatalf("%d switches, want 1: %v", n, ev.kinds())
	}
	t.Logf("switch %v after the LDM call; %+v; suppressed %d", sw.At.Sub(start), rep, c.Stats().DuplicatesSuppressed)
}

// TestNoneRidesToEviction is the control for the test above: the same
// cluster and trigger, and with NONE the active stays on the lame-duck
// broker until it is evicted.
func TestNoneRidesToEviction(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLameDuckHandling(ldm.None))
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "ldm.none")

	start := time.Now()
	done := a.EnterLameDuck()
	// The notice arrives (the trigger path is live) ...
	if e := ev.wait(t, apconn.EventLameDuck, time.Second); e.Role != apconn.RoleActive {
		t.Fatalf("LDM event for %v, want the active", e.Role)
	}
	// ... and the active does not move.
	sw := ev.wait(t, apconn.EventSwitched, 2*testGrace)
	if took := sw.At.Sub(start); took < testGrace*9/10 {
		t.Fatalf("NONE switched after %v, before the %v grace period", took, testGrace)
	}
	if sw.Cause != apconn.CauseActiveDown {
		t.Fatalf("cause %v, want active-down (the eviction)", sw.Cause)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("after eviction the active is on %s, want the passive %s", got.Name(), p.Name())
	}
	runPast(t, tr, done)
	rep := settle(t, tr)
	if rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	t.Logf("NONE switched %v after the LDM call (grace %v); %+v", sw.At.Sub(start), testGrace, rep)
}

func TestPassiveLDMRehomesPassiveOnly(t *testing.T) {
	for _, h := range []ldm.LameDuckHandling{ldm.SwitchToPassive, ldm.PassiveOnly} {
		t.Run(h.String(), func(t *testing.T) {
			cl := ldmCluster(t)
			ev := newEvents()
			c := connect(t, cl, ev, apconn.WithLameDuckHandling(h))
			a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
			activeBefore, _ := c.ActiveServer()
			tr := traffic(t, c, "ldm.passive")
			ev.reset()

			start := time.Now()
			done := p.EnterLameDuck()
			lost := ev.wait(t, apconn.EventPassiveLost, time.Second)
			if lost.Cause != apconn.CausePassiveLameDuck {
				t.Fatalf("passive lost with cause %v", lost.Cause)
			}
			armed := ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
			n := cl.NodeByServerID(armed.To.ID)
			if n == nil || n == a || n == p {
				t.Fatalf("passive re-homed to %v, want the third broker", armed.To.Name)
			}
			if armed.At.Sub(start) > testGrace {
				t.Fatalf("re-home took %v, past the grace period", armed.At.Sub(start))
			}
			runPast(t, tr, done)
			activeAfter, _ := c.ActiveServer()
			if activeAfter != activeBefore || ev.count(apconn.EventSwitched) != 0 {
				t.Fatalf("the active moved: %+v -> %+v, events %v", activeBefore, activeAfter, ev.kinds())
			}
			if rep := settle(t, tr); rep.Lost != 0 {
				t.Fatalf("traffic: %+v", rep)
			}
		})
	}
}

// TestNonePassiveRidesToEviction is the control for the re-home: with NONE
// the passive stays on its lame-duck broker until it is evicted.
func TestNonePassiveRidesToEviction(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLameDuckHandling(ldm.None))
	p := passiveNode(t, cl, c)
	start := time.Now()
	p.EnterLameDuck()
	ev.wait(t, apconn.EventLameDuck, time.Second)
	lost := ev.wait(t, apconn.EventPassiveLost, 3*testGrace)
	if took := lost.At.Sub(start); took < testGrace*9/10 {
		t.Fatalf("NONE replaced the passive after %v, before eviction at %v", took, testGrace)
	}
	ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
}

func TestPassiveOnlyLetsActiveRideThenPromotes(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLameDuckHandling(ldm.PassiveOnly))
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "ldm.passiveonly")
	start := time.Now()
	done := a.EnterLameDuck()
	ev.wait(t, apconn.EventLameDuck, time.Second)
	sw := ev.wait(t, apconn.EventSwitched, 3*testGrace)
	if took := sw.At.Sub(start); took < testGrace*9/10 {
		t.Fatalf("PASSIVE_ONLY switched after %v, before eviction", took)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active on %s, want %s", got.Name(), p.Name())
	}
	// After the eviction the switch to the warm passive is immediate.
	if sw.Duration > 500*time.Millisecond {
		t.Fatalf("promotion after eviction took %v", sw.Duration)
	}
	runPast(t, tr, done)
	if rep := settle(t, tr); rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
}

func TestKillActivePromotesPassiveAtOnce(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "kill.active")
	start := time.Now()
	a.Kill()
	sw := ev.wait(t, apconn.EventSwitched, 2*time.Second)
	if sw.Cause != apconn.CauseActiveDown {
		t.Fatalf("cause %v", sw.Cause)
	}
	if took := sw.At.Sub(start); took > 500*time.Millisecond {
		t.Fatalf("promotion took %v", took)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active on %s, want %s", got.Name(), p.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.WaitReceived(ctx, tr.Sent()+50); err != nil {
		t.Fatal(err)
	}
	rep := settle(t, tr)
	if rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	t.Logf("kill: switch in %v, replayed %d, %+v", sw.Duration, sw.Replayed, rep)
}

func TestFrozenActiveLinkPromotesPassive(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithProxies())
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLiveness(100*time.Millisecond, 300*time.Millisecond))
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "freeze.active")
	a.Proxy().Freeze()
	defer a.Proxy().Heal()
	sw := ev.wait(t, apconn.EventSwitched, 3*time.Second)
	if sw.Cause != apconn.CauseLinkTimeout {
		t.Fatalf("cause %v", sw.Cause)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active on %s, want %s", got.Name(), p.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.WaitReceived(ctx, tr.Sent()+50); err != nil {
		t.Fatal(err)
	}
	if rep := settle(t, tr); rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
}

func TestBothBrokersLDMSwitchesThenRehomesOnThird(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLameDuckHandling(ldm.SwitchToPassive))
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	var third *natstest.Node
	for _, n := range cl.Nodes() {
		if n != a && n != p {
			third = n
		}
	}
	tr := traffic(t, c, "ldm.both")
	doneP := p.EnterLameDuck()
	doneA := a.EnterLameDuck()
	// The active moves onto the (lame-duck) passive, then onto a passive
	// armed on the third broker.
	deadline := time.After(testGrace)
	for {
		s, ok := c.ActiveServer()
		if ok && s.ID == third.ServerID() {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("active not on the third broker before eviction; events %v", ev.kinds())
		case <-time.After(5 * time.Millisecond):
		}
	}
	runPast(t, tr, doneA)
	<-doneP
	if rep := settle(t, tr); rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	if c.Status() != apconn.StatusDegraded {
		t.Fatalf("status %v: only one broker is left", c.Status())
	}
}

func TestNoPassiveFallsBackToReconnect(t *testing.T) {
	cl := ldmCluster(t, natstest.WithNodes(2))
	ev := newEvents()
	c := connect(t, cl, ev,
		apconn.WithPassiveBackoff(time.Minute, time.Minute), // no re-arm during the test
		apconn.WithReconnectWait(50*time.Millisecond))
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "ldm.nopassive")
	p.Kill()
	ev.wait(t, apconn.EventPassiveLost, 2*time.Second)
	ev.wait(t, apconn.EventDegraded, 2*time.Second)
	if c.Status() != apconn.StatusDegraded {
		t.Fatalf("status %v", c.Status())
	}
	done := a.EnterLameDuck()
	ev.wait(t, apconn.EventLameDuck, time.Second)
	<-done
	down := ev.wait(t, apconn.EventActiveDown, time.Second)
	if down.Cause != apconn.CauseActiveDown {
		t.Fatalf("active down cause %v", down.Cause)
	}
	if err := p.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, apconn.EventReconnected, 5*time.Second)
	if s, _ := c.ActiveServer(); s.ID != p.ServerID() {
		t.Fatalf("reconnected to %s", s.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.WaitReceived(ctx, tr.Sent()+50); err != nil {
		t.Fatal(err)
	}
	rep := settle(t, tr)
	if rep.Lost != 0 || rep.PublishErrors != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	if ev.count(apconn.EventSwitched) != 0 {
		t.Fatalf("switched with no passive: %v", ev.kinds())
	}
}

func TestDegradedStartArmsPassiveLater(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithNodes(2))
	cl.Node(1).Kill()
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithPassiveBackoff(20*time.Millisecond, 100*time.Millisecond))
	if st := c.Status(); st != apconn.StatusDegraded {
		t.Fatalf("status %v, want degraded with one broker", st)
	}
	if e := ev.wait(t, apconn.EventDegraded, time.Second); e.Err == nil {
		t.Fatal("degraded event without a reason")
	}
	if err := cl.Node(1).Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
	if st := c.Status(); st != apconn.StatusConnected {
		t.Fatalf("status %v after the second broker came back", st)
	}
}

func TestManualSwitchAndRehome(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "manual")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev.reset()
	if err := c.SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active on %s, want %s", got.Name(), p.Name())
	}
	ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
	before := passiveNode(t, cl, c)
	if err := c.RehomePassive(ctx); err != nil {
		t.Fatal(err)
	}
	after := passiveNode(t, cl, c)
	if after == activeNode(t, cl, c) {
		t.Fatal("re-homed passive shares the active's broker")
	}
	if err := tr.WaitReceived(ctx, tr.Sent()+20); err != nil {
		t.Fatal(err)
	}
	if rep := settle(t, tr); rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	t.Logf("active %s -> %s, passive %s -> %s", a.Name(), p.Name(), before.Name(), after.Name())
}

func TestBadServerURLs(t *testing.T) {
	tests := []struct{ urls []string }{
		{nil},
		{[]string{""}},
		{[]string{"http://127.0.0.1:4222"}},
		{[]string{"nats://:4222"}},
		{[]string{"nats://127.0.0.1:port"}},
		{[]string{"nats://127.0.0.1:4222", "nats://%zz"}},
	}
	for _, tt := range tests {
		_, err := apconn.Connect(context.Background(), tt.urls)
		var ue *apconn.URLError
		if !errors.As(err, &ue) {
			t.Errorf("Connect(%q) = %v, want a URLError", tt.urls, err)
		}
	}
}

func TestUnreachableServersReportNoServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := apconn.Connect(ctx, []string{"nats://127.0.0.1:1"})
	if !errors.Is(err, apconn.ErrNoServers) {
		t.Fatalf("err = %v", err)
	}
}

func TestSubscriptionKindsSurviveSwitch(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	// An outside publisher on the third broker, and a responder.
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	var third *natstest.Node
	for _, n := range cl.Nodes() {
		if n != a && n != p {
			third = n
		}
	}
	ext, err := nats.Connect(third.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close()
	ext.Subscribe("svc.echo", func(m *nats.Msg) { m.Respond(m.Data) })
	ext.Flush()

	ch := make(chan *nats.Msg, 4096)
	if _, err := c.ChanSubscribe("ext.chan", ch); err != nil {
		t.Fatal(err)
	}
	q := make(chan *nats.Msg, 4096)
	if _, err := c.QueueSubscribe("ext.queue", "workers", func(m *nats.Msg) { q <- m }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c.Flush(ctx)
	trChan := natstest.NewTraffic(ext, "ext.chan", time.Millisecond)
	trQueue := natstest.NewTraffic(ext, "ext.queue", time.Millisecond)
	go func() {
		for m := range ch {
			trChan.Observe(m.Data)
		}
	}()
	go func() {
		for m := range q {
			trQueue.Observe(m.Data)
		}
	}()
	trChan.Start()
	trQueue.Start()
	if err := trChan.WaitReceived(ctx, 50); err != nil {
		t.Fatal(err)
	}
	if err := c.SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := c.Request(ctx, "svc.echo", []byte("hi")); err != nil || string(m.Data) != "hi" {
		t.Fatalf("request after switch: %v %v", m, err)
	}
	if err := trChan.WaitReceived(ctx, trChan.Sent()+100); err != nil {
		t.Fatal(err)
	}
	trChan.Stop()
	trQueue.Stop()
	trChan.Settle(ctx)
	trQueue.Settle(ctx)
	close(ch)
	close(q)
	for name, r := range map[string]natstest.TrafficReport{"chan": trChan.Report(), "queue": trQueue.Report()} {
		if r.Lost != 0 || r.Duplicated != 0 {
			t.Errorf("%s subscription across the switch: %+v", name, r)
		}
	}
}

// outsideObserver subscribes to subj on the broker that is neither active
// nor passive.
func outsideObserver(t *testing.T, cl *natstest.Cluster, c *apconn.Conn, subj string) *natstest.Traffic {
	t.Helper()
	return observeOn(t, thirdNode(t, cl, c), c, subj)
}

// observeOn subscribes to subj with a plain client on node and returns once
// the subscription reaches c's broker, so that nothing c publishes is
// dropped there for want of interest.
func observeOn(t *testing.T, node *natstest.Node, c *apconn.Conn, subj string) *natstest.Traffic {
	t.Helper()
	ext, err := nats.Connect(node.DirectURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Close)
	obs := natstest.NewTraffic(c, subj, time.Millisecond)
	if _, err := ext.Subscribe(subj, func(m *nats.Msg) { obs.Observe(m.Data) }); err != nil {
		t.Fatal(err)
	}
	testutil.WaitInterest(t, ext, c)
	return obs
}

// checkOutside fails the test unless outer saw messages first..sent once
// each and in order.
func checkOutside(t *testing.T, ctx context.Context, outer *natstest.Traffic, first, sent uint64) {
	t.Helper()
	if err := outer.WaitReceived(ctx, sent-first+1); err != nil {
		t.Fatal(err)
	}
	if r := outer.ReportUpTo(sent); r.OutOfOrder != 0 || r.Duplicated != 0 {
		t.Fatalf("subscriber outside: %+v", r)
	}
}

// TestFastCutoverWaitsOutTheSlowerLink gives the active a 30 ms round trip
// and the passive none. Publishes written to the active just before a fast
// cutover are still 15 ms from its broker when the passive takes over, so
// unless the cutover waits out the difference a subscriber on a third broker
// sees the passive's first messages before the active's last ones.
func TestFastCutoverWaitsOutTheSlowerLink(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithClientRTT(30*time.Millisecond))
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithFastCutover(), apconn.WithLiveness(20*time.Millisecond, time.Second))
	p := passiveNode(t, cl, c)
	p.Proxy().SetDelay(0)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for apconn.PassiveRTT(c) > 5*time.Millisecond {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("passive round trip still %v", apconn.PassiveRTT(c))
		}
	}
	outer := outsideObserver(t, cl, c, "order.skew")
	tr := traffic(t, c, "order.skew")
	first := tr.Sent() + 1
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev.reset()
	if err := c.SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	if s, _ := c.ActiveServer(); s.ID != p.ServerID() {
		t.Fatalf("switched to %s", s.Name)
	}
	rep := settle(t, tr)
	if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Duplicated != 0 {
		t.Fatalf("subscriber on the connection: %+v", rep)
	}
	checkOutside(t, ctx, outer, first, rep.Sent)
}

// switchTimes switches to the passive n times, waiting each time for a new
// passive.
func switchTimes(t *testing.T, ctx context.Context, c *apconn.Conn, ev *events, n int) {
	t.Helper()
	for range n {
		ev.reset()
		if err := c.SwitchToPassive(ctx); err != nil {
			t.Fatal(err)
		}
		ev.wait(t, apconn.EventPassiveArmed, 5*time.Second)
	}
}

// TestOrderKeptAcrossSwitches publishes in bursts, as fast as Publish
// returns, while the connection switches back and forth, and checks that a
// subscriber on the connection and one outside it, on the broker that
// starts as the third, see every message once and in order.
//
// On a 3-node cluster the three switches put the outside subscriber on
// each side in turn: on a third broker (the first switch), on the new
// active's broker (the second: the cutover waits for the old broker's
// route to it) and on the old active's broker (the third). On a third
// broker the order rests on the client's round trip to the brokers
// outlasting the old broker's route; the cluster here puts 10 ms of round
// trip between clients and brokers, as a real network would, and the
// outside subscriber bypasses it.
func TestOrderKeptAcrossSwitches(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithClientRTT(10*time.Millisecond))
	ev := newEvents()
	c := connect(t, cl, ev)
	const subj = "order.burst"
	outer := outsideObserver(t, cl, c, subj)
	inner := natstest.NewTraffic(c, subj, time.Millisecond)
	if _, err := c.Subscribe(subj, func(m *nats.Msg) { inner.Observe(m.Data) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c.Flush(ctx)

	stop := bursts(t, c, subj)
	switchTimes(t, ctx, c, ev, 3)
	total := stop()
	if err := inner.WaitReceived(ctx, total); err != nil {
		t.Fatal(err)
	}
	if err := outer.WaitReceived(ctx, total); err != nil {
		t.Fatal(err)
	}
	for who, tr := range map[string]*natstest.Traffic{"on the connection": inner, "outside": outer} {
		r := tr.ReportUpTo(total)
		if r.Lost != 0 || r.OutOfOrder != 0 || r.Duplicated != 0 {
			t.Errorf("subscriber %s: %+v (copies of %v)", who, r, tr.DuplicateSeqs(5))
		}
	}
	t.Logf("%d messages through 3 switches; %d copies suppressed; stats %+v", total, c.Stats().DuplicatesSuppressed, c.Stats())
}

// bursts publishes on subj through c in bursts of 200 back-to-back
// messages, numbered across bursts, until the returned function is called;
// that function returns how many were published.
func bursts(t *testing.T, c *apconn.Conn, subj string) (stop func() uint64) {
	t.Helper()
	var seq uint64
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, natstest.TrafficPayloadSize)
		for {
			select {
			case <-quit:
				return
			default:
			}
			for range 200 {
				seq++
				putSeq(buf, seq)
				if err := c.Publish(subj, buf); err != nil {
					t.Error(err)
					return
				}
			}
			time.Sleep(time.Millisecond) // pace the bursts, not a wait for a condition
		}
	}()
	return func() uint64 {
		close(quit)
		<-done
		return seq
	}
}

// TestOrderKeptForSubscriberOnNewBroker switches a burst publisher to the
// passive with no client round trip to hide behind, and checks the order a
// subscriber on the passive's broker sees. The old broker's last messages
// reach that broker over a route, the first new ones straight from the
// client: the old broker confirming what it was sent does not prove its
// route has delivered it, so the cutover must wait for the route.
func TestOrderKeptForSubscriberOnNewBroker(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	const subj = "order.newbroker"
	obs := observeOn(t, passiveNode(t, cl, c), c, subj)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stop := bursts(t, c, subj)
	// Let the bursts reach the subscriber before the switch, so the old
	// broker's route is busy when the cutover happens (the positive
	// control: traffic flows before the switch, too).
	if err := obs.WaitReceived(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	if err := c.SwitchToPassive(ctx); err != nil {
		t.Fatal(err)
	}
	after := obs.ReportUpTo(math.MaxUint64).Received
	if err := obs.WaitReceived(ctx, after+1000); err != nil {
		t.Fatal(err)
	}
	total := stop()
	if err := obs.WaitReceived(ctx, total); err != nil {
		t.Fatal(err)
	}
	if r := obs.ReportUpTo(total); r.Lost != 0 || r.OutOfOrder != 0 || r.Duplicated != 0 {
		t.Fatalf("subscriber on the new active's broker: %+v", r)
	}
}

// TestFastCutoverKeepsSteadyOrder: with WithFastCutover a steady publisher
// keeps its order, with no copies, for subscribers on the connection and
// outside it.
func TestFastCutoverKeepsSteadyOrder(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithFastCutover())
	outer := outsideObserver(t, cl, c, "order.steady")
	tr := traffic(t, c, "order.steady")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	first := tr.Sent() + 1
	switchTimes(t, ctx, c, ev, 3)
	rep := settle(t, tr)
	if rep.Lost != 0 || rep.OutOfOrder != 0 || rep.Duplicated != 0 {
		t.Fatalf("subscriber on the connection: %+v", rep)
	}
	checkOutside(t, ctx, outer, first, rep.Sent)
}
