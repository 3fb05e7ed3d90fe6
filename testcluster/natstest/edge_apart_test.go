package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestEdgeHubAndSiteStartedApart is the edge a benchmark builds when the
// hub runs in a process of its own: StartHub, then StartSite dialing its
// LeafURLs, linked (WaitSiteLinked), sourced (SourceFromSiteOn) and cut
// by the hub's Edge. The positive control is the hub holding nothing new
// during the cut; the catch-up after the heal shows the two are one edge.
func TestEdgeHubAndSiteStartedApart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	o := EdgeOptions{HubNodes: 1, SiteNodes: 1}
	e, err := StartHub(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	if e.Site != nil {
		t.Fatal("StartHub started a site")
	}
	site, err := StartSite(ctx, o, e.LeafURLs()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(site.Close)
	hub := connect(t, e.Hub, e.Hub.URLs()[0])
	if err := WaitSiteLinked(ctx, site, hub, e.SiteDomain); err != nil {
		t.Fatal(err)
	}
	sjs := siteStream(ctx, t, site, jetstream.StreamConfig{})
	if err := SourceFromSiteOn(ctx, hub, e.SiteDomain, "HUB", "SITE", 1); err != nil {
		t.Fatal(err)
	}
	hubMsgs := func() uint64 { return StreamMsgs(ctx, e.Hub, "HUB") }
	publish := func(n int) {
		t.Helper()
		for range n {
			if _, err := sjs.Publish(ctx, "plant.t", nil); err != nil {
				t.Fatalf("publish at the site: %v", err)
			}
		}
	}
	publish(50)
	waitFor(t, "the hub to source the first 50", 30*time.Second, func() bool { return hubMsgs() == 50 })
	e.CutWAN()
	waitFor(t, "the leaf connections to go", 10*time.Second, func() bool { return e.LeafConns() == 0 })
	publish(50)
	if got := hubMsgs(); got != 50 {
		t.Fatalf("the hub holds %d messages during the cut, want 50: the cut did not cut", got)
	}
	e.HealWAN()
	waitFor(t, "the hub to catch up", 30*time.Second, func() bool { return hubMsgs() == 100 })
}

// TestEdgeCatchupRate is WithCatchupRate: the site's source consumer sends
// the hub a backlog no faster than the cap. The control is a second hub
// stream sourcing the same backlog without a cap, at least twice as fast:
// the cap, not the machine, made the first one slow.
func TestEdgeCatchupRate(t *testing.T) {
	e := startEdge(t, EdgeOptions{HubNodes: 1, SiteNodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// MaxMsgSize bounds the limiter's burst (the largest message): the
	// whole backlog is paced.
	sjs := siteStream(ctx, t, e.Site, jetstream.StreamConfig{MaxMsgSize: 2048})
	const msgs, size = 2000, 1000
	payload := make([]byte, size)
	for range msgs {
		if _, err := sjs.PublishAsync("plant.t", payload); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-sjs.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	copyTime := func(name string, opts ...SourceOption) time.Duration {
		t.Helper()
		start := time.Now()
		if err := e.SourceFromSite(ctx, name, "SITE", 1, opts...); err != nil {
			t.Fatal(err)
		}
		waitFor(t, name+" to source the backlog", 60*time.Second, func() bool { return StreamMsgs(ctx, e.Hub, name) == msgs })
		return time.Since(start)
	}
	// 2 MB at 4 Mbit/s (500 kB/s): 4 s.
	capped := copyTime("CAPPED", WithCatchupRate(4_000_000))
	free := copyTime("FREE")
	t.Logf("backlog of %d updates of %d bytes: capped at 4 Mbit/s in %v, uncapped in %v", msgs, size, capped, free)
	if capped < 3*time.Second {
		t.Fatalf("the capped source copied 2 MB in %v, faster than 4 Mbit/s allows (4 s)", capped)
	}
	if free > capped/2 {
		t.Fatalf("the uncapped source took %v, the capped %v: the control is not faster, the comparison shows nothing", free, capped)
	}
}

// TestEdgeLeafCompression is WithLeafCompression: the site's leaf
// connection sends in the mode it was given. The control is a site
// without it, whose connection is in another mode: the option, not the
// server's default, set the first.
func TestEdgeLeafCompression(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := StartHub(ctx, EdgeOptions{HubNodes: 1, SiteNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	mode := func(opts ...Option) string {
		t.Helper()
		site, err := StartSite(ctx, EdgeOptions{SiteNodes: 1, SiteDomain: "site", Site: opts}, e.LeafURLs()...)
		if err != nil {
			t.Fatal(err)
		}
		defer site.Close()
		var got string
		waitFor(t, "the site's leaf connection", 30*time.Second, func() bool {
			lz, err := site.Node(0).Server().Leafz(nil)
			if err != nil || len(lz.Leafs) == 0 {
				return false
			}
			got = lz.Leafs[0].Compression
			return true
		})
		return got
	}
	if got := mode(WithLeafCompression("s2_fast")); got != "s2_fast" {
		t.Fatalf("leaf connection with WithLeafCompression(s2_fast) compresses %q", got)
	}
	if got := mode(); got == "s2_fast" {
		t.Fatalf("leaf connection without WithLeafCompression compresses %q too: the test cannot tell the option's effect", got)
	}
}
