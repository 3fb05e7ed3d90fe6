package natstest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startEdge starts an edge topology that the test's cleanup closes.
func startEdge(t *testing.T, o EdgeOptions) *Edge {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	e, err := StartEdge(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// siteStream creates the stream SITE on plant.> in the site cluster c,
// with cfg's other settings, and returns a JetStream on c.
func siteStream(ctx context.Context, t *testing.T, c *Cluster, cfg jetstream.StreamConfig) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(connect(t, c, c.URLs()[0]))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name, cfg.Subjects = "SITE", []string{"plant.>"}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	return js
}

// waitFor polls cond every 20 ms until it holds or d passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEdgeHubSourcesAcrossACut is the store and forward the edge topology
// exists for: a site stream keeps storing while the WAN is cut, and the
// hub stream that sources from it catches up when it heals, every message
// once and in order. The positive control is the hub holding nothing new
// during the cut: the cut is real.
func TestEdgeHubSourcesAcrossACut(t *testing.T) {
	e := startEdge(t, EdgeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sjs := siteStream(ctx, t, e.Site, jetstream.StreamConfig{Replicas: 3})
	hub := connect(t, e.Hub, e.Hub.URLs()[0])
	hjs, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.SourceFromSite(ctx, "HUB", "SITE", 3); err != nil {
		t.Fatal(err)
	}

	var expected []string
	publish := func(n int) {
		t.Helper()
		for range n {
			id := strconv.Itoa(len(expected))
			m := nats.NewMsg("plant.t" + strconv.Itoa(len(expected)%7))
			m.Header.Set(jetstream.MsgIDHeader, id)
			if _, err := sjs.PublishMsg(ctx, m); err != nil {
				t.Fatalf("publish %s at the site: %v", id, err)
			}
			expected = append(expected, id)
		}
	}
	hubMsgs := func() uint64 {
		s, err := hjs.Stream(ctx, "HUB")
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	publish(200)
	waitFor(t, "the hub to source the first 200", 30*time.Second, func() bool { return hubMsgs() == 200 })

	e.CutWAN()
	waitFor(t, "the leaf connections to go", 10*time.Second, func() bool { return e.LeafConns() == 0 })
	publish(300) // the site stores on while the WAN is down
	if got := hubMsgs(); got != 200 {
		t.Fatalf("the hub holds %d messages during the cut, want 200: the cut did not cut", got)
	}
	e.HealWAN()
	waitFor(t, "the hub to catch up", 30*time.Second, func() bool { return hubMsgs() == 500 })

	stored, err := ReadStream(ctx, hub, "HUB")
	if err != nil {
		t.Fatal(err)
	}
	bySubject := map[string][]string{}
	for i, id := range expected {
		s := "plant.t" + strconv.Itoa(i%7)
		bySubject[s] = append(bySubject[s], id)
	}
	if a := Audit(bySubject, stored); !a.OK() || a.Stored != 500 {
		t.Fatalf("hub stream: %v", a)
	}
	for i, m := range stored {
		if m.MsgID != fmt.Sprint(i) {
			t.Fatalf("hub message %d has id %s: the hub's order is not the site's", i, m.MsgID)
		}
	}
}

// TestEdgeHubResumesSoonAfterALongCut is what SourceFromSite's durable
// source consumer is for: after a cut longer than the hub's 10 s check of
// a silent source, the hub's request for a new source consumer has gone
// into the cut. An ephemeral source waits 30 s for its answer, then backs
// off; the durable one hears the site's heartbeat and resumes within
// seconds of the heal. The positive control is the hub holding nothing new
// during the cut.
func TestEdgeHubResumesSoonAfterALongCut(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts the WAN for 25 s")
	}
	e := startEdge(t, EdgeOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sjs := siteStream(ctx, t, e.Site, jetstream.StreamConfig{Replicas: 3})
	if err := e.SourceFromSite(ctx, "HUB", "SITE", 3); err != nil {
		t.Fatal(err)
	}
	hub := connect(t, e.Hub, e.Hub.URLs()[0])
	hjs, err := jetstream.New(hub)
	if err != nil {
		t.Fatal(err)
	}
	hubMsgs := func() uint64 {
		s, err := hjs.Stream(ctx, "HUB")
		if err != nil {
			return 0
		}
		return s.CachedInfo().State.Msgs
	}
	publish := func(n int) {
		t.Helper()
		for range n {
			if _, err := sjs.Publish(ctx, "plant.t", nil); err != nil {
				t.Fatalf("publish at the site: %v", err)
			}
		}
	}
	publish(100)
	waitFor(t, "the hub to source the first 100", 30*time.Second, func() bool { return hubMsgs() == 100 })

	e.CutWAN()
	waitFor(t, "the leaf connections to go", 10*time.Second, func() bool { return e.LeafConns() == 0 })
	publish(100)
	cutFor := 25 * time.Second
	deadline := time.NewTimer(cutFor)
	select {
	case <-deadline.C:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	if got := hubMsgs(); got != 100 {
		t.Fatalf("the hub holds %d messages during the cut, want 100: the cut did not cut", got)
	}
	e.HealWAN()
	waitFor(t, "the hub to catch up within 10 s of the heal", 10*time.Second, func() bool { return hubMsgs() == 200 })
}
