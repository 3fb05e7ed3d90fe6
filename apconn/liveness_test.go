package apconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/apbridge/apbridge/apconn"
	"github.com/apbridge/apbridge/internal/testutil"
	"github.com/apbridge/apbridge/testcluster/natstest"
	"github.com/nats-io/nats.go"
)

// TestBusySlowLinkIsKept gives the active's link a round trip longer than
// the liveness timeout while traffic flows on it: each PONG comes back
// after the timeout, behind the messages the broker sent first, but bytes
// keep arriving, so the link is kept. Freezing it then, the positive
// control, is a link timeout.
func TestBusySlowLinkIsKept(t *testing.T) {
	cl := testutil.StartCluster(t, natstest.WithProxies())
	ev := newEvents()
	c := connect(t, cl, ev, apconn.WithLiveness(100*time.Millisecond, 300*time.Millisecond))
	a := activeNode(t, cl, c)
	// A feed published on the active's broker keeps bytes coming down the
	// link from the moment the delay is set.
	ext, err := nats.Connect(a.DirectURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ext.Close)
	if _, err := c.Subscribe("busy.feed", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	feed := natstest.NewTraffic(ext, "busy.feed", time.Millisecond)
	feed.Start()
	t.Cleanup(feed.Stop)
	tr := traffic(t, c, "busy.slow")
	ev.reset()
	a.Proxy().SetDelay(200 * time.Millisecond) // a 400 ms round trip
	defer a.Proxy().SetDelay(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// A second and more of traffic through the slow link: several PINGs
	// each outlive the 300 ms timeout.
	if err := tr.WaitReceived(ctx, tr.Sent()+1000); err != nil {
		t.Fatal(err)
	}
	if n := ev.count(apconn.EventSwitched); n != 0 {
		t.Fatalf("a slow but delivering link was replaced: %v", ev.kinds())
	}
	a.Proxy().Freeze()
	defer a.Proxy().Heal()
	sw := ev.wait(t, apconn.EventSwitched, 5*time.Second)
	if sw.Cause != apconn.CauseLinkTimeout {
		t.Fatalf("frozen link: switch cause %v, want link-timeout", sw.Cause)
	}
}
