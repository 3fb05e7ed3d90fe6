package apconn_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

func TestLDMDuringClose(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	tr := traffic(t, c, "race.close")
	a := activeNode(t, cl, c)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.EnterLameDuck() }()
	go func() { defer wg.Done(); c.Close() }()
	wg.Wait()
	tr.Stop()
	c.Close() // idempotent
	if st := c.Status(); st != apconn.StatusClosed {
		t.Fatalf("status %v", st)
	}
	if err := c.Publish("x", nil); err == nil {
		t.Fatal("publish on a closed connection succeeded")
	}
	if _, err := c.Subscribe("x", func(*nats.Msg) {}); err == nil {
		t.Fatal("subscribe on a closed connection succeeded")
	}
}

// TestLDMAndDisconnectTogether: the notice and the loss of the link arrive
// together (a reconnect already under way when the LDM switch would run);
// the connection switches once and loses nothing.
func TestLDMAndDisconnectTogether(t *testing.T) {
	cl := ldmCluster(t, natstest.WithProxies())
	ev := newEvents()
	c := connect(t, cl, ev)
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	tr := traffic(t, c, "race.reconnect")
	ev.reset()
	done := a.EnterLameDuck()
	a.Proxy().ResetAll()
	sw := ev.wait(t, apconn.EventSwitched, 2*time.Second)
	if got := activeNode(t, cl, c); got != p {
		t.Fatalf("active on %s, want %s", got.Name(), p.Name())
	}
	runPast(t, tr, done)
	rep := settle(t, tr)
	if rep.Lost != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
	if n := ev.count(apconn.EventSwitched); n != 1 {
		t.Fatalf("%d switches for one fault: %v", n, ev.kinds())
	}
	t.Logf("cause %v", sw.Cause)
}

func TestTwoLDMsInARow(t *testing.T) {
	cl := ldmCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	a, p := activeNode(t, cl, c), passiveNode(t, cl, c)
	third := thirdNode(t, cl, c)
	tr := traffic(t, c, "race.twoldm")
	ev.reset()
	doneA := a.EnterLameDuck()
	ev.wait(t, apconn.EventSwitched, testGrace)
	ev.wait(t, apconn.EventPassiveArmed, testGrace)
	doneP := p.EnterLameDuck()
	sw := ev.wait(t, apconn.EventSwitched, testGrace)
	if sw.To.ID != third.ServerID() {
		t.Fatalf("second switch to %s, want %s", sw.To.Name, third.Name())
	}
	runPast(t, tr, doneA)
	runPast(t, tr, doneP)
	if rep := settle(t, tr); rep.Lost != 0 || rep.OutOfOrder != 0 {
		t.Fatalf("traffic: %+v", rep)
	}
}

func TestKillPassiveDuringSwitch(t *testing.T) {
	cl := testutil.StartCluster(t)
	ev := newEvents()
	c := connect(t, cl, ev)
	p := passiveNode(t, cl, c)
	tr := traffic(t, c, "race.killpassive")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); p.Kill() }()
	err := c.SwitchToPassive(ctx) // may win or lose the race
	wg.Wait()
	// Whatever happened, the connection ends up on a live broker with a
	// passive, and traffic flows without loss.
	deadline := time.Now().Add(10 * time.Second)
	for c.Status() != apconn.StatusConnected {
		if time.Now().After(deadline) {
			t.Fatalf("status %v after the race (switch error %v); events %v", c.Status(), err, ev.kinds())
		}
		time.Sleep(10 * time.Millisecond) // poll with a deadline
	}
	if n := activeNode(t, cl, c); !n.Running() {
		t.Fatalf("active on dead node %s", n.Name())
	}
	if err := tr.WaitReceived(ctx, tr.Sent()+100); err != nil {
		t.Fatal(err)
	}
	if rep := settle(t, tr); rep.Lost != 0 {
		t.Fatalf("traffic: %+v (switch error %v)", rep, err)
	}
}

// TestIdleFootprint: an idle ApConnection holds no more than twice the
// goroutines of two nats.Conn.
func TestIdleFootprint(t *testing.T) {
	cl := testutil.StartCluster(t)
	const n = 10
	// settled samples the goroutine count until it stops changing:
	// goroutines start and stop asynchronously.
	settled := func() int {
		last, stable := -1, 0
		for stable < 5 {
			if c := runtime.NumGoroutine(); c == last {
				stable++
			} else {
				last, stable = c, 0
			}
			time.Sleep(10 * time.Millisecond) // sampling, not a wait for a condition
		}
		return last
	}
	count := func(open func() func()) float64 {
		before := settled()
		var closers []func()
		for range n {
			closers = append(closers, open())
		}
		after := settled()
		for _, c := range closers {
			c()
		}
		return float64(after-before) / n
	}
	plain := count(func() func() {
		a, err := nats.Connect(cl.Node(0).URL())
		if err != nil {
			t.Fatal(err)
		}
		b, err := nats.Connect(cl.Node(1).URL())
		if err != nil {
			t.Fatal(err)
		}
		return func() { a.Close(); b.Close() }
	})
	ap := count(func() func() {
		c, err := apconn.Connect(context.Background(), cl.URLs())
		if err != nil {
			t.Fatal(err)
		}
		return c.Close
	})
	t.Logf("goroutines: ApConnection %.1f, two nats.Conn %.1f", ap, plain)
	if plain <= 0 || ap > 2*plain {
		t.Fatalf("an idle ApConnection runs %.1f goroutines, more than twice the %.1f of two nats.Conn", ap, plain)
	}
}
